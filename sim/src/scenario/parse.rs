//! From the YAML tree to a [`Scenario`]: every key checked, defaults filled in, the first error
//! reported with its file, line and key path.

use super::error::ScenarioError;
use super::model::*;
use super::yaml::{self, Entry, Node, Scalar, Value};
use engine::runtime::Mode;
use engine::time::{Duration, Timestamp, parse_go_duration};
use std::collections::BTreeMap;
use std::path::Path;

type Result<T> = std::result::Result<T, ScenarioError>;

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "seed",
    "duration",
    "world",
    "mode",
    "management",
    "workload",
    "timeline",
    "expect",
];
const WORLD_KEYS: &[&str] = &[
    "start",
    "nodeMonitorGracePeriod",
    "podShutdown",
    "volumeDetach",
    "infraProvision",
    "infraDelete",
    "nodeJoin",
    "machineSets",
    "reschedule",
    "podStartup",
    "capiManager",
    "capiRelease",
];
const STEP_ACTIONS: &[&str] = &[
    "apply",
    "patch",
    "delete",
    "nodeCondition",
    "kubelet",
    "fault",
    "capiRelease",
];
const REF_KEYS: &[&str] = &["kind", "name", "namespace", "apiVersion", "cluster"];
const PATCH_KEYS: &[&str] = &[
    "kind",
    "name",
    "namespace",
    "apiVersion",
    "cluster",
    "merge",
];
const CHECK_KEYS: &[&str] = &["condition", "fields", "present", "absent"];
const COUNT_KEYS: &[&str] = &["count", "atLeast", "atMost"];

/// The scenario files (`*.yaml`) of a directory, sorted.
pub fn files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Reads and parses a scenario file; errors name the path as given.
pub fn load(path: &Path) -> Result<Scenario> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: file.clone(),
        line: 0,
        path: String::new(),
        message: format!("cannot read: {e}"),
    })?;
    parse(&file, &text)
}

/// Parses scenario text; `file` is only used in errors and [`Scenario::file`].
pub fn parse(file: &str, text: &str) -> Result<Scenario> {
    let root = yaml::parse_document(text).map_err(|e| ScenarioError {
        file: file.to_string(),
        line: e.line,
        path: String::new(),
        message: e.message,
    })?;
    let mut cx = Ctx {
        file,
        clusters: Vec::new(),
    };
    let top = if root.is_null() {
        Map {
            line: root.line,
            path: String::new(),
            entries: &[],
        }
    } else {
        cx.map(&root, "", "a map of scenario keys")?
    };
    cx.only(&top, TOP_KEYS)?;

    let name = cx.req_string(&top, "name")?;
    let description = cx.opt_string(&top, "description")?.unwrap_or_default();
    let seed = match top.get("seed") {
        Some(n) => cx.uint(n, &top.path("seed"))?,
        None => 0,
    };
    let duration = match top.get("duration") {
        Some(n) => cx.duration(n, &top.path("duration"))?,
        None => DEFAULT_DURATION,
    };
    let world = match top.get("world") {
        Some(n) => cx.world(n, &top.path("world"))?,
        None => WorldKnobs::default(),
    };
    let mode = match top.get("mode") {
        Some(n) => cx.mode(n, &top.path("mode"))?,
        None => Mode::Alone,
    };
    let management = match top.get("management") {
        Some(n) => cx.manifests(n, &top.path("management"))?,
        None => Vec::new(),
    };
    let workload = match top.get("workload") {
        Some(n) => cx.workload(n, &top.path("workload"))?,
        None => BTreeMap::new(),
    };
    cx.clusters = workload.keys().cloned().collect();
    let timeline = match top.get("timeline") {
        Some(n) => {
            let path = top.path("timeline");
            let items = cx.seq(n, &path, "a list of steps")?;
            let steps = items.iter().enumerate();
            steps
                .map(|(i, s)| cx.step(s, &index(&path, i)))
                .collect::<Result<_>>()?
        }
        None => Vec::new(),
    };
    let expect = match top.get("expect") {
        Some(n) => {
            let path = top.path("expect");
            let items = cx.seq(n, &path, "a list of expectations")?;
            let entries = items.iter().enumerate();
            entries
                .map(|(i, e)| cx.expectation(e, &index(&path, i)))
                .collect::<Result<_>>()?
        }
        None => Vec::new(),
    };
    Ok(Scenario {
        name,
        description,
        seed,
        duration,
        world,
        mode,
        management,
        workload,
        timeline,
        expect,
        file: file.to_string(),
    })
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// A YAML map at a key path. A key whose value is `null` counts as absent for `get`.
struct Map<'n> {
    line: usize,
    path: String,
    entries: &'n [Entry],
}

impl<'n> Map<'n> {
    fn entry(&self, key: &str) -> Option<&'n Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entry(key).map(|e| &e.value).filter(|n| !n.is_null())
    }
    /// The key is written, even with a null value.
    fn has(&self, key: &str) -> bool {
        self.entry(key).is_some()
    }
    fn path(&self, key: &str) -> String {
        child(&self.path, key)
    }
}

/// What every check needs: the file name for errors and the workload clusters that exist.
struct Ctx<'f> {
    file: &'f str,
    clusters: Vec<String>,
}

impl Ctx<'_> {
    fn err(&self, line: usize, path: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            line,
            path: path.to_string(),
            message: message.into(),
        }
    }

    fn map<'n>(&self, node: &'n Node, path: &str, what: &str) -> Result<Map<'n>> {
        match &node.value {
            Value::Map(entries) => Ok(Map {
                line: node.line,
                path: path.to_string(),
                entries,
            }),
            _ => Err(self.err(
                node.line,
                path,
                format!("expected {what}, got {}", node.describe()),
            )),
        }
    }

    /// Rejects keys outside `allowed`.
    fn only(&self, m: &Map<'_>, allowed: &[&str]) -> Result<()> {
        match m
            .entries
            .iter()
            .find(|e| !allowed.contains(&e.key.as_str()))
        {
            None => Ok(()),
            Some(e) => Err(self.err(
                e.key_line,
                &m.path(&e.key),
                format!("unknown key (expected one of: {})", allowed.join(", ")),
            )),
        }
    }

    fn required<'n>(&self, m: &Map<'n>, key: &str) -> Result<&'n Node> {
        m.get(key).ok_or_else(|| {
            let line = m.entry(key).map_or(m.line, |e| e.key_line);
            self.err(line, &m.path(key), "missing")
        })
    }

    fn seq<'n>(&self, node: &'n Node, path: &str, what: &str) -> Result<&'n [Node]> {
        match &node.value {
            Value::Seq(items) => Ok(items),
            _ => Err(self.err(
                node.line,
                path,
                format!("expected {what}, got {}", node.describe()),
            )),
        }
    }

    fn string(&self, node: &Node, path: &str) -> Result<String> {
        match &node.value {
            Value::Scalar(Scalar::Str(s)) => Ok(s.clone()),
            Value::Scalar(Scalar::Bool(_)) => Err(self.err(
                node.line,
                path,
                format!(
                    "expected a string, got {} (quote it to make it a string)",
                    node.describe()
                ),
            )),
            _ => Err(self.err(
                node.line,
                path,
                format!("expected a string, got {}", node.describe()),
            )),
        }
    }

    /// A required, non-empty string.
    fn req_string(&self, m: &Map<'_>, key: &str) -> Result<String> {
        let node = self.required(m, key)?;
        let s = self.string(node, &m.path(key))?;
        if s.is_empty() {
            return Err(self.err(node.line, &m.path(key), "must not be empty"));
        }
        Ok(s)
    }

    /// A Cluster API release: an image tag (`v1.12.0`) or digest (`sha256:…`).
    fn release(&self, node: &Node, path: &str) -> Result<CapiRelease> {
        let s = self.string(node, path)?;
        let tag = s.starts_with('v') && s[1..].split('.').count() >= 2;
        let digest = s.strip_prefix("sha256:").is_some_and(|d| !d.is_empty());
        if !(tag || digest) || s.contains(char::is_whitespace) {
            return Err(self.err(
                node.line,
                path,
                format!("{s:?} is not a release (an image tag such as v1.12.0, or sha256:…)"),
            ));
        }
        Ok(CapiRelease(s))
    }

    /// The controller's mode.
    fn mode(&self, node: &Node, path: &str) -> Result<Mode> {
        let s = self.one_of(node, path, &["alone", "shadow", "takeover"])?;
        s.parse().map_err(|e: String| self.err(node.line, path, e))
    }

    fn opt_string(&self, m: &Map<'_>, key: &str) -> Result<Option<String>> {
        m.get(key).map(|n| self.string(n, &m.path(key))).transpose()
    }

    fn one_of(&self, node: &Node, path: &str, choices: &[&str]) -> Result<String> {
        let s = self.string(node, path)?;
        if choices.contains(&s.as_str()) {
            Ok(s)
        } else {
            let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
            Err(self.err(
                node.line,
                path,
                format!("{s:?} is not one of {}", quoted.join(", ")),
            ))
        }
    }

    fn boolean(&self, node: &Node, path: &str) -> Result<bool> {
        match &node.value {
            Value::Scalar(Scalar::Bool(b)) => Ok(*b),
            _ => Err(self.err(
                node.line,
                path,
                format!("expected true or false, got {}", node.describe()),
            )),
        }
    }

    fn uint(&self, node: &Node, path: &str) -> Result<u64> {
        match &node.value {
            Value::Scalar(Scalar::Int(i)) => {
                u64::try_from(*i).map_err(|_| self.err(node.line, path, format!("{i} is negative")))
            }
            _ => Err(self.err(
                node.line,
                path,
                format!("expected a non-negative integer, got {}", node.describe()),
            )),
        }
    }

    /// A Go duration string (`30s`, `1h30m`), not negative. A bare integer other than 0 is an
    /// error that says which unit to add.
    fn duration(&self, node: &Node, path: &str) -> Result<Duration> {
        let text = match &node.value {
            Value::Scalar(Scalar::Str(s)) => s.clone(),
            Value::Scalar(Scalar::Int(i)) => i.to_string(),
            Value::Scalar(Scalar::Float(x)) => x.to_string(),
            _ => {
                return Err(self.err(
                    node.line,
                    path,
                    format!("expected a duration like 30s, got {}", node.describe()),
                ));
            }
        };
        let d = parse_go_duration(&text).map_err(|m| self.err(node.line, path, m))?;
        if d < Duration::ZERO {
            return Err(self.err(node.line, path, format!("{text:?} is negative")));
        }
        Ok(d)
    }

    /// `[T1, T2]` with `T1 <= T2`.
    fn window(&self, node: &Node, path: &str) -> Result<(Duration, Duration)> {
        let items = self.seq(node, path, "a window [T1, T2]")?;
        let [from, to] = items else {
            return Err(self.err(
                node.line,
                path,
                format!("expected a window [T1, T2], got {} items", items.len()),
            ));
        };
        let from_d = self.duration(from, &index(path, 0))?;
        let to_d = self.duration(to, &index(path, 1))?;
        if from_d > to_d {
            return Err(self.err(
                node.line,
                path,
                format!("the window ends ({to_d}) before it starts ({from_d})"),
            ));
        }
        Ok((from_d, to_d))
    }

    /// A workload cluster named in `workload`.
    fn cluster(&self, node: &Node, path: &str) -> Result<String> {
        let name = self.string(node, path)?;
        if self.clusters.contains(&name) {
            return Ok(name);
        }
        Err(self.err(
            node.line,
            path,
            format!(
                "workload cluster {name:?} does not exist ({})",
                self.clusters_known()
            ),
        ))
    }

    fn clusters_known(&self) -> String {
        if self.clusters.is_empty() {
            "workload is empty".to_string()
        } else {
            format!("workload has: {}", self.clusters.join(", "))
        }
    }

    fn world(&self, node: &Node, path: &str) -> Result<WorldKnobs> {
        let m = self.map(node, path, "a map of world knobs")?;
        self.only(&m, WORLD_KEYS)?;
        let mut w = WorldKnobs::default();
        if let Some(n) = m.get("start") {
            let s = self.string(n, &m.path("start"))?;
            w.start =
                Timestamp::parse_rfc3339(&s).map_err(|e| self.err(n.line, &m.path("start"), e))?;
        }
        let durations = [
            ("nodeMonitorGracePeriod", &mut w.node_monitor_grace_period),
            ("podShutdown", &mut w.pod_shutdown),
            ("volumeDetach", &mut w.volume_detach),
            ("infraProvision", &mut w.infra_provision),
            ("infraDelete", &mut w.infra_delete),
            ("nodeJoin", &mut w.node_join),
            ("podStartup", &mut w.pod_startup),
        ];
        for (key, slot) in durations {
            if let Some(n) = m.get(key) {
                *slot = self.duration(n, &m.path(key))?;
            }
        }
        if let Some(n) = m.get("machineSets") {
            w.machine_sets = match self
                .one_of(n, &m.path("machineSets"), &["replace", "none"])?
                .as_str()
            {
                "replace" => MachineSetsMode::Replace,
                _ => MachineSetsMode::None,
            };
        }
        if let Some(n) = m.get("reschedule") {
            w.reschedule = self.boolean(n, &m.path("reschedule"))?;
        }
        if let Some(n) = m.get("capiManager") {
            w.capi_manager = self.boolean(n, &m.path("capiManager"))?;
        }
        if let Some(n) = m.get("capiRelease") {
            w.capi_release = self.release(n, &m.path("capiRelease"))?;
        }
        Ok(w)
    }

    fn manifests(&self, node: &Node, path: &str) -> Result<Vec<Manifest>> {
        let items = self.seq(node, path, "a list of objects")?;
        let items = items.iter().enumerate();
        items
            .map(|(i, n)| self.manifest(n, &index(path, i)))
            .collect()
    }

    /// A Kubernetes object: only its identity is checked, its content is the controllers' to judge.
    fn manifest(&self, node: &Node, path: &str) -> Result<Manifest> {
        let m = self.map(node, path, "a Kubernetes object (a map)")?;
        self.req_string(&m, "apiVersion")?;
        self.req_string(&m, "kind")?;
        let meta = self.required(&m, "metadata")?;
        let meta = self.map(meta, &m.path("metadata"), "a map")?;
        self.req_string(&meta, "name")?;
        let namespace = self.opt_string(&meta, "namespace")?;
        let kind = self.req_string(&m, "kind")?;
        let mut value = node.to_json();
        if namespace.is_none() && !is_cluster_scoped(&kind) {
            // As kubectl does: a namespaced object without a namespace goes to `default`.
            value["metadata"]["namespace"] = serde_json::Value::from("default");
        }
        Ok(Manifest {
            line: node.line,
            value,
        })
    }

    fn workload(&self, node: &Node, path: &str) -> Result<BTreeMap<String, Vec<Manifest>>> {
        let m = self.map(node, path, "a map of cluster name to objects")?;
        let mut out = BTreeMap::new();
        for e in m.entries {
            let objects = if e.value.is_null() {
                Vec::new()
            } else {
                self.manifests(&e.value, &m.path(&e.key))?
            };
            out.insert(e.key.clone(), objects);
        }
        Ok(out)
    }

    /// Reads a reference's keys from `m` (the caller checks which keys are allowed).
    fn obj_ref_of(&self, m: &Map<'_>) -> Result<ObjRef> {
        Ok(ObjRef {
            kind: self.req_string(m, "kind")?,
            name: self.req_string(m, "name")?,
            namespace: self
                .opt_string(m, "namespace")?
                .unwrap_or_else(|| "default".to_string()),
            api_version: self.opt_string(m, "apiVersion")?,
            cluster: m
                .get("cluster")
                .map(|n| self.cluster(n, &m.path("cluster")))
                .transpose()?,
        })
    }

    fn obj_ref(&self, node: &Node, path: &str) -> Result<ObjRef> {
        let m = self.map(
            node,
            path,
            "an object reference {kind, name, namespace, cluster}",
        )?;
        self.only(&m, REF_KEYS)?;
        self.obj_ref_of(&m)
    }

    fn step(&self, node: &Node, path: &str) -> Result<Step> {
        let m = self.map(node, path, "a step {at, <action>}")?;
        if let Some(e) = m.entries.iter().find(|e| {
            !matches!(e.key.as_str(), "at" | "cluster") && !STEP_ACTIONS.contains(&e.key.as_str())
        }) {
            return Err(self.err(
                e.key_line,
                &m.path(&e.key),
                format!(
                    "unknown step action (expected at, cluster and one of: {})",
                    STEP_ACTIONS.join(", ")
                ),
            ));
        }
        let at = self.duration(self.required(&m, "at")?, &m.path("at"))?;
        let mut cluster = m
            .get("cluster")
            .map(|n| self.cluster(n, &m.path("cluster")))
            .transpose()?;
        let actions: Vec<&Entry> = m
            .entries
            .iter()
            .filter(|e| STEP_ACTIONS.contains(&e.key.as_str()))
            .collect();
        let e = match actions.as_slice() {
            [one] => *one,
            [] => {
                return Err(self.err(
                    node.line,
                    path,
                    format!(
                        "no action (a step has exactly one of: {})",
                        STEP_ACTIONS.join(", ")
                    ),
                ));
            }
            [_, second, ..] => {
                let names: Vec<&str> = actions.iter().map(|a| a.key.as_str()).collect();
                return Err(self.err(
                    second.key_line,
                    path,
                    format!(
                        "more than one action ({}); a step has exactly one",
                        names.join(", ")
                    ),
                ));
            }
        };
        let apath = m.path(&e.key);
        let action = match e.key.as_str() {
            "apply" => StepAction::Apply(self.manifest(&e.value, &apath)?),
            "patch" => {
                let pm = self.map(&e.value, &apath, "{kind, name, namespace, merge}")?;
                self.only(&pm, PATCH_KEYS)?;
                let mut r = self.obj_ref_of(&pm)?;
                cluster = self.ref_cluster(&pm, &mut r, cluster)?;
                let merge = self.required(&pm, "merge")?;
                self.map(merge, &pm.path("merge"), "a map (a JSON merge patch)")?;
                StepAction::Patch {
                    r,
                    merge: merge.to_json(),
                }
            }
            "delete" => {
                let dm = self.map(&e.value, &apath, "{kind, name, namespace}")?;
                self.only(&dm, REF_KEYS)?;
                let mut r = self.obj_ref_of(&dm)?;
                cluster = self.ref_cluster(&dm, &mut r, cluster)?;
                StepAction::Delete(r)
            }
            "nodeCondition" => {
                let nm = self.map(&e.value, &apath, "{node, type, status, reason, message}")?;
                self.only(&nm, &["node", "type", "status", "reason", "message"])?;
                let action = StepAction::NodeCondition {
                    node: self.req_string(&nm, "node")?,
                    type_: self.req_string(&nm, "type")?,
                    status: self.condition_status(&nm)?,
                    reason: self.opt_string(&nm, "reason")?,
                    message: self.opt_string(&nm, "message")?,
                };
                cluster = Some(self.node_cluster(cluster, node, path, "nodeCondition")?);
                action
            }
            "kubelet" => {
                let km = self.map(&e.value, &apath, "{node, state}")?;
                self.only(&km, &["node", "state"])?;
                let node_name = self.req_string(&km, "node")?;
                let state_node = self.required(&km, "state")?;
                let state = match self
                    .one_of(state_node, &km.path("state"), &["stopped", "running"])?
                    .as_str()
                {
                    "stopped" => KubeletState::Stopped,
                    _ => KubeletState::Running,
                };
                cluster = Some(self.node_cluster(cluster, node, path, "kubelet")?);
                StepAction::Kubelet {
                    node: node_name,
                    state,
                }
            }
            "capiRelease" => {
                if cluster.is_some() {
                    return Err(self.err(
                        e.value.line,
                        &apath,
                        "capiRelease acts on the management cluster: no cluster",
                    ));
                }
                StepAction::CapiRelease(self.release(&e.value, &apath)?)
            }
            _ => StepAction::Fault(self.fault(&e.value, &apath)?),
        };
        Ok(Step {
            at,
            line: node.line,
            cluster,
            action,
        })
    }

    /// A reference inside a step may name the cluster too; it must agree with the step's.
    fn ref_cluster(
        &self,
        m: &Map<'_>,
        r: &mut ObjRef,
        step_cluster: Option<String>,
    ) -> Result<Option<String>> {
        match (&step_cluster, &r.cluster) {
            (Some(s), Some(c)) if s != c => Err(self.err(
                m.get("cluster").map_or(m.line, |n| n.line),
                &m.path("cluster"),
                format!("{c:?} conflicts with the step's cluster {s:?}"),
            )),
            _ => {
                let cluster = step_cluster.or(r.cluster.take());
                r.cluster.clone_from(&cluster);
                Ok(cluster)
            }
        }
    }

    /// `nodeCondition` and `kubelet` act on a workload cluster: the named one, or the only one.
    fn node_cluster(
        &self,
        named: Option<String>,
        step: &Node,
        path: &str,
        action: &str,
    ) -> Result<String> {
        if let Some(c) = named {
            return Ok(c);
        }
        match self.clusters.as_slice() {
            [only] => Ok(only.clone()),
            _ => Err(self.err(
                step.line,
                &child(path, "cluster"),
                format!(
                    "missing: a {action} step needs cluster: unless there is exactly one workload cluster ({})",
                    self.clusters_known()
                ),
            )),
        }
    }

    fn condition_status(&self, m: &Map<'_>) -> Result<String> {
        let n = self.required(m, "status")?;
        self.one_of(n, &m.path("status"), &["True", "False", "Unknown"])
    }

    fn fault(&self, node: &Node, path: &str) -> Result<FaultSpec> {
        let m = self.map(node, path, "a fault {kind, ...}")?;
        let kind_node = self.required(&m, "kind")?;
        let name = self.string(kind_node, &m.path("kind"))?;
        let kind = FaultKind::from_name(&name).ok_or_else(|| {
            let known: Vec<&str> = FaultKind::ALL.iter().map(|k| k.as_str()).collect();
            self.err(
                kind_node.line,
                &m.path("kind"),
                format!(
                    "unknown fault kind {name:?} (expected one of: {})",
                    known.join(", ")
                ),
            )
        })?;
        // The contract's kinds have fixed parameters; later kinds keep theirs in `extra`.
        let params: Option<&[&str]> = match kind {
            FaultKind::ControllerRestart => Some(&[]),
            FaultKind::ApiErrors => Some(&["rate", "for"]),
            FaultKind::Partition | FaultKind::WatchGap => Some(&["for"]),
            FaultKind::TornJournal
            | FaultKind::Conflicts
            | FaultKind::SlowApi
            | FaultKind::KubeletStop
            | FaultKind::NodeFlap
            | FaultKind::NodeNeverJoins
            | FaultKind::InfraProvisionFailure
            | FaultKind::Eviction429
            | FaultKind::StuckHook
            | FaultKind::CacheUnsynced
            | FaultKind::ReorderedDelivery
            | FaultKind::CoalescedEvents
            | FaultKind::WatchExpired
            | FaultKind::RelistDuplicates
            | FaultKind::WriteTimeout
            | FaultKind::BacklogBatches
            | FaultKind::CorruptObject
            | FaultKind::JournalDamage
            | FaultKind::Kubeconfig => None,
        };
        let mut extra = BTreeMap::new();
        match params {
            Some(params) => {
                let allowed: Vec<&str> = std::iter::once("kind")
                    .chain(params.iter().copied())
                    .collect();
                self.only(&m, &allowed)?;
                for p in params {
                    self.required(&m, p)?;
                }
            }
            None => {
                for e in m.entries {
                    if !matches!(e.key.as_str(), "kind" | "rate" | "for") {
                        extra.insert(e.key.clone(), e.value.to_json());
                    }
                }
            }
        }
        if kind == FaultKind::JournalDamage
            && let Some(n) = m.get("damage")
        {
            self.one_of(n, &m.path("damage"), &super::model::DAMAGE_KINDS)?;
        }
        if kind == FaultKind::Kubeconfig
            && let Some(n) = m.get("problem")
        {
            self.one_of(n, &m.path("problem"), &super::model::KUBECONFIG_PROBLEMS)?;
        }
        let rate = m
            .get("rate")
            .map(|n| self.rate(n, &m.path("rate")))
            .transpose()?;
        let for_ = m
            .get("for")
            .map(|n| self.duration(n, &m.path("for")))
            .transpose()?;
        Ok(FaultSpec {
            kind,
            rate,
            for_,
            extra,
        })
    }

    fn rate(&self, node: &Node, path: &str) -> Result<f64> {
        let x = match &node.value {
            Value::Scalar(Scalar::Int(i)) => *i as f64,
            Value::Scalar(Scalar::Float(x)) => *x,
            _ => {
                return Err(self.err(
                    node.line,
                    path,
                    format!("expected a number from 0.0 to 1.0, got {}", node.describe()),
                ));
            }
        };
        if !(0.0..=1.0).contains(&x) {
            return Err(self.err(node.line, path, format!("{x} is not between 0.0 and 1.0")));
        }
        Ok(x)
    }

    fn expectation(&self, node: &Node, path: &str) -> Result<Expectation> {
        let m = self.map(node, path, "an expectation (a map)")?;
        let kind = if m.has("action") {
            self.expect_action(&m)?
        } else if m.has("order") {
            self.expect_order(&m)?
        } else if m.has("event") {
            self.expect_event(&m)?
        } else if m.has("gone") || m.has("exists") {
            let key = if m.has("gone") { "gone" } else { "exists" };
            self.only(&m, &["at", key])?;
            let at = self.duration(self.required(&m, "at")?, &m.path("at"))?;
            let object = self.obj_ref(self.required(&m, key)?, &m.path(key))?;
            if key == "gone" {
                ExpectKind::Gone { at, object }
            } else {
                ExpectKind::Exists { at, object }
            }
        } else if m.has("object") {
            self.expect_object(&m)?
        } else {
            return Err(self.err(
                node.line,
                path,
                "not an expectation: it needs object:, gone:, exists:, action:, order: or event:",
            ));
        };
        Ok(Expectation {
            line: node.line,
            kind,
        })
    }

    /// `{at: T | during: [T1, T2], object: REF, <check>}`.
    fn expect_object(&self, m: &Map<'_>) -> Result<ExpectKind> {
        self.only(
            m,
            &[
                "at",
                "during",
                "object",
                "condition",
                "fields",
                "present",
                "absent",
            ],
        )?;
        let object = self.obj_ref(self.required(m, "object")?, &m.path("object"))?;
        let checks: Vec<&Entry> = m
            .entries
            .iter()
            .filter(|e| CHECK_KEYS.contains(&e.key.as_str()))
            .collect();
        let check = match checks.as_slice() {
            [one] => self.check(one, &m.path(&one.key))?,
            [] => {
                return Err(self.err(
                    m.line,
                    &m.path,
                    format!("missing what to check (one of: {})", CHECK_KEYS.join(", ")),
                ));
            }
            [_, second, ..] => {
                return Err(self.err(
                    second.key_line,
                    &m.path(&second.key),
                    format!("only one of {} per expectation", CHECK_KEYS.join(", ")),
                ));
            }
        };
        match (m.get("at"), m.get("during")) {
            (Some(at), None) => Ok(ExpectKind::At {
                at: self.duration(at, &m.path("at"))?,
                object,
                check,
            }),
            (None, Some(w)) => {
                let (from, to) = self.window(w, &m.path("during"))?;
                Ok(ExpectKind::During {
                    from,
                    to,
                    object,
                    check,
                })
            }
            (Some(_), Some(w)) => {
                Err(self.err(w.line, &m.path("during"), "use at: or during:, not both"))
            }
            (None, None) => Err(self.err(m.line, &m.path("at"), "missing (or during: [T1, T2])")),
        }
    }

    fn check(&self, e: &Entry, path: &str) -> Result<Check> {
        let node = &e.value;
        match e.key.as_str() {
            "condition" => {
                let cm = self.map(
                    node,
                    path,
                    "{type, status, reason, message} or {type, absent: true}",
                )?;
                if let Some(a) = cm.get("absent") {
                    self.only(&cm, &["type", "absent"])?;
                    if !self.boolean(a, &cm.path("absent"))? {
                        return Err(self.err(
                            a.line,
                            &cm.path("absent"),
                            "only absent: true is meaningful; leave it out",
                        ));
                    }
                    return Ok(Check::ConditionAbsent {
                        type_: self.req_string(&cm, "type")?,
                    });
                }
                self.only(&cm, &["type", "status", "reason", "message"])?;
                Ok(Check::Condition {
                    type_: self.req_string(&cm, "type")?,
                    status: self.condition_status(&cm)?,
                    reason: self.opt_string(&cm, "reason")?,
                    message: self.opt_string(&cm, "message")?,
                })
            }
            "fields" => {
                let fm = self.map(node, path, "a map of path to value")?;
                if fm.entries.is_empty() {
                    return Err(self.err(node.line, path, "lists no fields"));
                }
                let fields = fm.entries.iter();
                Ok(Check::Fields(
                    fields.map(|f| (f.key.clone(), f.value.to_json())).collect(),
                ))
            }
            _ => {
                let items = self.seq(node, path, "a list of paths")?;
                if items.is_empty() {
                    return Err(self.err(node.line, path, "lists no paths"));
                }
                let paths = items.iter().enumerate();
                let paths = paths
                    .map(|(i, p)| self.string(p, &index(path, i)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(if e.key == "present" {
                    Check::Present(paths)
                } else {
                    Check::Absent(paths)
                })
            }
        }
    }

    fn action_name(&self, m: &Map<'_>) -> Result<String> {
        let n = self.required(m, "action")?;
        let name = self.string(n, &m.path("action"))?;
        if CONTROLLER_ACTIONS.contains(&name.as_str()) {
            return Ok(name);
        }
        Err(self.err(
            n.line,
            &m.path("action"),
            format!(
                "unknown action {name:?} (expected one of: {})",
                CONTROLLER_ACTIONS.join(", ")
            ),
        ))
    }

    fn target(&self, m: &Map<'_>, key: &str) -> Result<Option<ObjRef>> {
        m.get(key)
            .map(|n| self.obj_ref(n, &m.path(key)))
            .transpose()
    }

    /// `count: N`, `atLeast: N`, `atMost: N`, or `atLeast` with `atMost`.
    fn count_spec(&self, m: &Map<'_>) -> Result<Option<CountSpec>> {
        let read = |key: &str| m.get(key).map(|n| self.uint(n, &m.path(key))).transpose();
        let (count, least, most) = (read("count")?, read("atLeast")?, read("atMost")?);
        match (count, least, most) {
            (None, None, None) => Ok(None),
            (Some(n), None, None) => Ok(Some(CountSpec::Exactly(n))),
            (Some(_), ..) => {
                let other = if least.is_some() { "atLeast" } else { "atMost" };
                let line = m.get(other).map_or(m.line, |n| n.line);
                Err(self.err(
                    line,
                    &m.path(other),
                    "use count: or atLeast:/atMost:, not both",
                ))
            }
            (None, Some(lo), None) => Ok(Some(CountSpec::AtLeast(lo))),
            (None, None, Some(hi)) => Ok(Some(CountSpec::AtMost(hi))),
            (None, Some(lo), Some(hi)) if lo <= hi => Ok(Some(CountSpec::Between(lo, hi))),
            (None, Some(lo), Some(hi)) => Err(self.err(
                m.get("atMost").map_or(m.line, |n| n.line),
                &m.path("atMost"),
                format!("atMost {hi} is below atLeast {lo}"),
            )),
        }
    }

    fn expect_action(&self, m: &Map<'_>) -> Result<ExpectKind> {
        self.only(
            m,
            &[
                "action",
                "target",
                "count",
                "atLeast",
                "atMost",
                "within",
                "notBefore",
                "never",
            ],
        )?;
        let name = self.action_name(m)?;
        let target = self.target(m, "target")?;
        let count = self.count_spec(m)?;
        let not_before = m.get("notBefore");
        let never = m.get("never");
        let within = m.get("within");
        let given = usize::from(count.is_some())
            + usize::from(not_before.is_some())
            + usize::from(never.is_some());
        if given != 1 {
            let message = if given == 0 {
                "missing count:, atLeast:, atMost:, notBefore: or never:"
            } else {
                "use one of count:/atLeast:/atMost:, notBefore: or never:"
            };
            return Err(self.err(m.line, &m.path, message));
        }
        if let (Some(w), None) = (within, count) {
            return Err(self.err(
                w.line,
                &m.path("within"),
                "within: goes with count:, atLeast: or atMost:",
            ));
        }
        if let Some(count) = count {
            let within = within
                .map(|w| self.window(w, &m.path("within")))
                .transpose()?;
            return Ok(ExpectKind::Action {
                name,
                target,
                count,
                within,
            });
        }
        if let Some(nb) = not_before {
            return Ok(ExpectKind::ActionNotBefore {
                name,
                target,
                not_before: self.duration(nb, &m.path("notBefore"))?,
            });
        }
        let never = never.unwrap_or_else(|| unreachable!("exactly one form was given"));
        if !self.boolean(never, &m.path("never"))? {
            return Err(self.err(
                never.line,
                &m.path("never"),
                "only never: true is meaningful",
            ));
        }
        Ok(ExpectKind::ActionNever { name, target })
    }

    fn expect_order(&self, m: &Map<'_>) -> Result<ExpectKind> {
        self.only(m, &["order"])?;
        let path = m.path("order");
        let node = self.required(m, "order")?;
        let items = self.seq(node, &path, "a list of {action, target}")?;
        if items.is_empty() {
            return Err(self.err(node.line, &path, "lists no actions"));
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let im = self.map(item, &index(&path, i), "{action, target}")?;
            self.only(&im, &["action", "target"])?;
            out.push((self.action_name(&im)?, self.target(&im, "target")?));
        }
        Ok(ExpectKind::Order(out))
    }

    fn expect_event(&self, m: &Map<'_>) -> Result<ExpectKind> {
        self.only(m, &["event", "object", "count", "atLeast", "atMost"])?;
        let reason = self.req_string(m, "event")?;
        let object = self.target(m, "object")?;
        let count = self.count_spec(m)?.ok_or_else(|| {
            self.err(
                m.line,
                &m.path("count"),
                format!("missing (or one of: {})", COUNT_KEYS[1..].join(", ")),
            )
        })?;
        Ok(ExpectKind::Event {
            reason,
            object,
            count,
        })
    }
}

/// Kinds a real API server serves without a namespace (the built-in ones a scenario may
/// hold; every CAPI and provider kind is namespaced).
fn is_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Node"
            | "Namespace"
            | "PersistentVolume"
            | "VolumeAttachment"
            | "StorageClass"
            | "CSINode"
            | "CSIDriver"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "CustomResourceDefinition"
            | "PriorityClass"
            | "RuntimeClass"
            | "IngressClass"
            | "APIService"
            | "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
    )
}
