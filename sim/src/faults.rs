//! Faults: from timeline `fault:` steps, or drawn per seed by a sweep. Each kind counts how often
//! it fired, so a sweep can prove it was exercised.

use crate::api::{ObjKey, Part};
use crate::env::Env;
use crate::event::Event;
use crate::scenario::{FaultKind, FaultSpec};
use crate::wire::{Hit, Verdict};
use engine::ApiOutcome;
use engine::connection::Unreachable;
use engine::model::{PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope};
use engine::time::{Duration, Timestamp, parse_go_duration};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label a `corrupt-object` fault gives a number for a value.
const CORRUPT_LABEL: &str = "sim.lifecycle/corrupt";

/// The value an `unparsable` kubeconfig Secret gets: base64 of `not a kubeconfig`.
const UNPARSABLE_KUBECONFIG: &str = "bm90IGEga3ViZWNvbmZpZw==";

/// What the connector finds in a Secret with `problem`. Over HTTP the real connector reads the
/// Secret the fault damaged and finds the same (an unparsable value's error in kube's words).
fn kubeconfig_problem(problem: &str) -> Unreachable {
    match problem {
        "no-value" => Unreachable::NoValue,
        "unparsable" => Unreachable::Unparsable {
            error: "the value is not a kubeconfig (simulated)".into(),
        },
        _ => Unreachable::SecretMissing,
    }
}

/// Default period of a `node-flap` fault.
pub const NODE_FLAP_PERIOD_DEFAULT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ActiveFault {
    pub kind: FaultKind,
    /// The cluster it applies to (`None`: every cluster, for world faults).
    pub scope: Option<Scope>,
    pub rate: f64,
    pub delay: Duration,
    pub until: Timestamp,
}

/// What a fault does to one API call.
pub enum Intercept {
    Pass,
    Fail(ApiOutcome),
    Delay(Duration),
}

#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub active: BTreeMap<usize, ActiveFault>,
    next_id: usize,
    /// How often each kind fired.
    pub fired: BTreeMap<&'static str, u64>,
    /// Clusters whose watch missed events and must be relisted when the fault ends.
    pub(crate) needs_relist: BTreeSet<Scope>,
    /// Clusters whose cache has not synced since the controller restarted.
    pub unsynced: BTreeSet<Scope>,
    /// Workload clusters whose kubeconfig Secret a `kubeconfig` fault breaks, with what their
    /// connector finds.
    pub kubeconfig: BTreeMap<Scope, Unreachable>,
    /// The run's seed: whether a call fails is decided by hashing it with what it hits and its
    /// attempt number for that ([`crate::wire::roll`]), so a call meets the same fate however
    /// many other calls were made.
    pub seed: u64,
    /// Requests made so far, by cluster and what they hit.
    attempts: BTreeMap<(Scope, Hit), u64>,
    /// Draws of the faults that pick a target (a Node to stop, a Machine to fail).
    pub rng: Draws,
    /// The `corrupt-object` fault's own stream, so that a run without it draws everything else
    /// alike (the corruption differential compares the two).
    pub corrupt_rng: Draws,
}

/// A seeded stream of draws (its own type, so that [`Faults`] keeps a derived `Default`).
#[derive(Clone, Debug)]
pub struct Draws(pub ChaCha8Rng);

impl Default for Draws {
    fn default() -> Self {
        Draws(ChaCha8Rng::seed_from_u64(0))
    }
}

/// Tells the `corrupt-object` stream from the main one.
const CORRUPT_STREAM: u64 = 0xC022_0B7E_C7ED_0001;

impl crate::wire::Active for Faults {
    fn active(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<(f64, Duration)> {
        self.active_for(scope, now, kind).map(|f| (f.rate, f.delay))
    }

    fn seed(&self) -> u64 {
        self.seed
    }
}

/// Where a `journal-damage` lands, decided by (seed, time) alone.
pub(crate) fn damage_roll(seed: u64, now: Timestamp) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in now.as_millis().to_le_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl Faults {
    /// Opens a fault's window on `scope` (all clusters: `None`) until `until`; returns its id.
    pub(crate) fn open(
        &mut self,
        kind: FaultKind,
        scope: Option<Scope>,
        window: &crate::wire::Window,
        until: Timestamp,
    ) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.active.insert(
            id,
            ActiveFault {
                kind,
                scope,
                rate: window.rate,
                delay: window.delay,
                until,
            },
        );
        id
    }

    pub fn new(seed: u64) -> Self {
        Faults {
            seed,
            rng: Draws(ChaCha8Rng::seed_from_u64(seed)),
            corrupt_rng: Draws(ChaCha8Rng::seed_from_u64(seed ^ CORRUPT_STREAM)),
            ..Default::default()
        }
    }

    pub fn fire(&mut self, kind: FaultKind) {
        *self.fired.entry(kind.as_str()).or_default() += 1;
    }

    /// Counts an order in which a result and its write's watch event reached the controller.
    pub fn fire_order(&mut self, order: &'static str) {
        *self.fired.entry(order).or_default() += 1;
    }

    /// Whether a fault of `kind` is in effect for `scope` now.
    pub fn is_active(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> bool {
        self.active_for(scope, now, kind).is_some()
    }

    /// The rate of the fault of `kind` in effect for `scope` now, if any.
    pub fn rate_of(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<f64> {
        self.active_for(scope, now, kind).map(|f| f.rate)
    }

    /// Whether a fault of `kind` is in effect for any cluster now.
    pub fn any_active(&self, now: Timestamp, kind: FaultKind) -> bool {
        self.active
            .values()
            .any(|f| f.kind == kind && now < f.until)
    }

    fn active_for(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<&ActiveFault> {
        self.active.values().find(|f| {
            f.kind == kind && f.scope.as_ref().is_none_or(|s| s == scope) && now < f.until
        })
    }

    /// Whether a world fault of `kind` is in effect now.
    pub fn world_active(&self, now: Timestamp, kind: FaultKind) -> bool {
        self.active
            .values()
            .any(|f| f.kind == kind && now < f.until)
    }

    /// The attempt number of a request for what it hits (0 for the first); a request a slow
    /// API held back keeps the number it arrived with (`again`).
    pub fn attempt(&mut self, scope: &Scope, hit: &Hit, again: bool) -> u64 {
        let n = self
            .attempts
            .entry((scope.clone(), hit.clone()))
            .or_default();
        if again {
            return n.saturating_sub(1);
        }
        *n += 1;
        *n - 1
    }

    /// What the faults in effect do to a request to `scope` that hits `hit` (see
    /// [`crate::wire::decide`]: the same draws as the fake API servers make over HTTP).
    pub fn intercept(
        &mut self,
        scope: &Scope,
        hit: &Hit,
        attempt: u64,
        now: Timestamp,
        delayed_already: bool,
    ) -> Intercept {
        let mut fired = Vec::new();
        let verdict = crate::wire::decide(
            &*self,
            scope,
            now,
            hit,
            attempt,
            delayed_already,
            &mut |k| fired.push(k),
        );
        for k in fired {
            self.fire(k);
        }
        match verdict {
            Verdict::Pass => Intercept::Pass,
            Verdict::Unreachable => Intercept::Fail(ApiOutcome::Unreachable {
                message: "simulated partition: the cluster's API cannot be reached".into(),
            }),
            Verdict::Delay(d) => Intercept::Delay(d),
            Verdict::Refuse(r) => Intercept::Fail(r.outcome()),
        }
    }

    /// Whether a write that happened times out (`write-timeout`), and how: the same draw as
    /// over HTTP.
    pub fn write_timeout(
        &mut self,
        scope: &Scope,
        hit: &Hit,
        attempt: u64,
        now: Timestamp,
    ) -> Option<crate::wire::Timeout> {
        let rate = self.rate_of(scope, now, FaultKind::WriteTimeout)?;
        let timeout = crate::wire::write_timeout(self.seed, scope, hit, attempt, rate)?;
        self.fire(FaultKind::WriteTimeout);
        Some(timeout)
    }

    pub fn hides_watch(&self, scope: &Scope, now: Timestamp) -> bool {
        self.active_for(scope, now, FaultKind::WatchGap).is_some()
            || self.active_for(scope, now, FaultKind::Partition).is_some()
            || self.unsynced.contains(scope)
    }

    pub fn missed_watch(&mut self, scope: &Scope, now: Timestamp) {
        self.needs_relist.insert(scope.clone());
        if self.active_for(scope, now, FaultKind::WatchGap).is_some() {
            self.fire(FaultKind::WatchGap);
        }
    }
}

pub(crate) fn extra_str<'a>(spec: &'a FaultSpec, key: &str) -> Option<&'a str> {
    spec.extra.get(key).and_then(Value::as_str)
}

pub(crate) fn extra_duration(spec: &FaultSpec, key: &str) -> Option<Duration> {
    extra_str(spec, key).and_then(|s| parse_go_duration(s).ok())
}

impl Faults {
    /// The node a fault names, or one drawn from the seed's stream.
    pub(crate) fn fault_node(
        &mut self,
        env: &Env<'_>,
        spec: &FaultSpec,
        scope: &Scope,
    ) -> Option<String> {
        if let Some(n) = extra_str(spec, "node") {
            return Some(n.to_string());
        }
        let nodes: Vec<String> = env
            .api
            .store(scope)?
            .list("", "Node")
            .map(|(k, _)| k.name.clone())
            .collect();
        if nodes.is_empty() {
            return None;
        }
        let i = self.rng.0.random_range(0..nodes.len());
        Some(nodes[i].clone())
    }

    /// The object a `corrupt-object` fault damages: the named Node (`node:`), Machine
    /// (`machine:`), MHC (`mhc:`) or MachinePool (`pool:`), else one drawn from the fault's own
    /// stream: a Node of the cluster half of the time, otherwise a Cluster, Machine, MHC,
    /// MachinePool or provider object of the management cluster.
    pub(crate) fn corruption_target(
        &mut self,
        env: &Env<'_>,
        spec: &FaultSpec,
        workload: Scope,
    ) -> Option<(Scope, ObjKey)> {
        if let Some(node) = extra_str(spec, "node") {
            return Some((workload, ObjKey::new("", "Node", "", node)));
        }
        let named = [
            ("machine", "Machine"),
            ("mhc", "MachineHealthCheck"),
            ("pool", "MachinePool"),
        ]
        .into_iter()
        .find_map(|(key, kind)| extra_str(spec, key).map(|name| (kind, name)));
        let management: Vec<ObjKey> = env
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.iter()
                    .map(|(k, _)| k)
                    .filter(|k| {
                        is_corruptible(k)
                            && named.is_none_or(|(kind, name)| k.kind == kind && k.name == name)
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if named.is_some() {
            return management.first().map(|k| (Scope::Management, k.clone()));
        }
        let rng = &mut self.corrupt_rng.0;
        if management.is_empty() || rng.random_bool(0.5) {
            let nodes: Vec<ObjKey> = env
                .api
                .store(&workload)?
                .list("", "Node")
                .map(|(k, _)| k.clone())
                .collect();
            let i = rng.random_range(0..nodes.len().max(1));
            return nodes.get(i).map(|k| (workload, k.clone()));
        }
        let i = rng.random_range(0..management.len());
        Some((Scope::Management, management[i].clone()))
    }

    /// Damages `key` below validation, as a buggy writer would: a label whose value is a
    /// number, a creation time that does not parse, a required field removed, or a negative
    /// timeout (`form:` picks one, else drawn among those that apply to the kind). Returns the
    /// merge patch that undoes it.
    pub(crate) fn corrupt(
        &mut self,
        env: &mut Env<'_>,
        scope: &Scope,
        key: &ObjKey,
        spec: &FaultSpec,
    ) -> Option<Value> {
        let original = env.api.get(scope, key)?.clone();
        let forms = Corruption::applicable(key);
        let form = match extra_str(spec, "form").and_then(Corruption::named) {
            Some(form) if forms.contains(&form) => form,
            Some(_) => Corruption::Label,
            None => forms[self.corrupt_rng.0.random_range(0..forms.len())],
        };
        let (path, bad) = form.damage(key, &original);
        let at = |value: Value| nested(&path, value);
        let before = path
            .iter()
            .try_fold(&original, |v, key| v.get(*key))
            .cloned()
            .unwrap_or(Value::Null);
        let detail = format!(
            "{} set to {} ({})",
            path.join("."),
            if bad.is_null() {
                "nothing".to_string()
            } else {
                bad.to_string()
            },
            form.what()
        );
        let w = env
            .api
            .store_mut(scope)
            .patch(key, &at(bad), Part::Whole)
            .ok()?;
        self.fire(FaultKind::CorruptObject);
        env.line("world", "Corrupt", crate::api::describe(scope, key), detail);
        env.changed(scope, w);
        Some(at(before))
    }

    /// Undoes a corruption: the object reads again.
    pub(crate) fn uncorrupt(env: &mut Env<'_>, scope: &Scope, key: &ObjKey, restore: &Value) {
        if env.api.get(scope, key).is_none() {
            return;
        }
        if let Ok(w) = env.api.store_mut(scope).patch(key, restore, Part::Whole) {
            let detail = "readable again".to_string();
            env.line("world", "Corrupt", crate::api::describe(scope, key), detail);
            env.changed(scope, w);
        }
    }

    /// Breaks the cluster's kubeconfig Secret (`problem:`, default `missing`) until `until`;
    /// returns the Secret as it was (the caller restarts the controller: a connection is made
    /// when it starts, so the restart is what meets the broken Secret). The Secret the store holds (served over HTTP, the real one the
    /// controller reads) is deleted, loses its key `value` or gets one that is no kubeconfig;
    /// in-process the simulated connector reports the same.
    pub(crate) fn break_kubeconfig(
        &mut self,
        env: &mut Env<'_>,
        spec: &FaultSpec,
        scope: &Scope,
        until: Timestamp,
    ) -> Option<Option<Value>> {
        let Scope::Workload(cluster) = scope else {
            return None;
        };
        let problem = extra_str(spec, "problem").unwrap_or("missing");
        let name = format!("{}-kubeconfig", cluster.name);
        let key = ObjKey::new("", "Secret", &cluster.namespace, &name);
        let original = env.api.get(&Scope::Management, &key).cloned();
        if original.is_some() {
            let now = env.clock.now;
            let store = env.api.store_mut(&Scope::Management);
            let written = match problem {
                "no-value" => store.patch(&key, &json!({"data": {"value": null}}), Part::Whole),
                "unparsable" => store.patch(
                    &key,
                    &json!({"data": {"value": UNPARSABLE_KUBECONFIG}}),
                    Part::Whole,
                ),
                _ => store.delete(&key, now),
            };
            if let Ok(w) = written {
                env.changed(&Scope::Management, w);
            }
        }
        let reason = kubeconfig_problem(problem);
        self.kubeconfig.insert(scope.clone(), reason.clone());
        self.fire(FaultKind::Kubeconfig);
        let object = format!("Secret {}/{name}", cluster.namespace);
        let detail = format!(
            "{problem} until {}: {}; the controller restarts and cannot connect",
            env.clock.offset_of(until),
            reason.detail(cluster)
        );
        env.line("world", "KubeconfigBroken", object, detail);
        Some(original)
    }

    /// A `kubeconfig` fault ends: the Secret is as it was.
    pub(crate) fn restore_kubeconfig(
        &mut self,
        env: &mut Env<'_>,
        scope: &Scope,
        original: Option<Value>,
    ) {
        let Scope::Workload(cluster) = scope else {
            return;
        };
        self.kubeconfig.remove(scope);
        if let Some(original) = original {
            let now = env.clock.now;
            if let Ok(w) = env.api.store_mut(&Scope::Management).apply(original, now) {
                env.changed(&Scope::Management, w);
            }
        }
        let object = format!("Secret {}/{}-kubeconfig", cluster.namespace, cluster.name);
        env.line(
            "world",
            "KubeconfigRestored",
            object,
            "the controller can connect again".into(),
        );
    }

    /// A hook whose controller never removes it: added to the named Machine or one drawn from
    /// the seed's stream.
    pub(crate) fn stick_hook(&mut self, env: &mut Env<'_>, spec: &FaultSpec) {
        let machines: Vec<ObjKey> = env
            .api
            .store(&Scope::Management)
            .map(|s| {
                s.list("cluster.x-k8s.io", "Machine")
                    .filter(|(k, _)| extra_str(spec, "machine").is_none_or(|m| m == k.name))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        if machines.is_empty() {
            return;
        }
        let key = machines[self.rng.0.random_range(0..machines.len())].clone();
        let prefix = match extra_str(spec, "hook") {
            Some("pre-terminate") => PRE_TERMINATE_HOOK_PREFIX,
            _ => PRE_DRAIN_HOOK_PREFIX,
        };
        let annotation = format!("{prefix}/stuck");
        let patch = json!({"metadata": {"annotations": {annotation.clone(): "nobody"}}});
        if let Ok(w) = env
            .api
            .store_mut(&Scope::Management)
            .patch(&key, &patch, Part::Whole)
        {
            self.fire(FaultKind::StuckHook);
            env.line(
                "world",
                "StuckHook",
                key.to_string(),
                format!("{annotation} added; its controller never removes it"),
            );
            env.changed(&Scope::Management, w);
        }
    }

    pub(crate) fn node_flap(
        &mut self,
        env: &mut Env<'_>,
        scope: Scope,
        node: String,
        period: Duration,
        until: Timestamp,
        ready: bool,
    ) {
        let last = env.clock.now + period >= until;
        let status = if ready || last { "True" } else { "False" };
        self.fire(FaultKind::NodeFlap);
        env.set_node_condition(
            &scope,
            &node,
            "Ready",
            status,
            Some(if status == "True" {
                "KubeletReady"
            } else {
                "KubeletNotReady"
            }),
            None,
        );
        if !last {
            env.schedule_in(
                period,
                Event::NodeFlap {
                    scope,
                    node,
                    period,
                    until,
                    ready: !ready,
                },
            );
        }
    }
}

/// The management objects a `corrupt-object` fault may damage: what the controllers decide on.
fn is_corruptible(key: &ObjKey) -> bool {
    match key.group.as_str() {
        "cluster.x-k8s.io" => matches!(
            key.kind.as_str(),
            "Cluster" | "Machine" | "MachineHealthCheck" | "MachinePool"
        ),
        group => group.ends_with(".cluster.x-k8s.io"),
    }
}

/// The ways a `corrupt-object` fault damages an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Corruption {
    /// A label whose value is a number (a wrong type: unreadable).
    Label,
    /// A creation time that does not parse (unreadable).
    Timestamp,
    /// `spec.clusterName` removed (a required field missing: unreadable).
    Missing,
    /// A negative timeout (readable, an invalid spec: it must time nothing).
    Negative,
}

impl Corruption {
    fn named(name: &str) -> Option<Corruption> {
        Some(match name {
            "label" => Corruption::Label,
            "timestamp" => Corruption::Timestamp,
            "missing" => Corruption::Missing,
            "negative" => Corruption::Negative,
            _ => return None,
        })
    }

    fn applicable(key: &ObjKey) -> Vec<Corruption> {
        let mut forms = vec![Corruption::Label, Corruption::Timestamp];
        let capi = key.group == "cluster.x-k8s.io";
        if capi
            && matches!(
                key.kind.as_str(),
                "Machine" | "MachineHealthCheck" | "MachinePool"
            )
        {
            forms.push(Corruption::Missing);
        }
        if capi && matches!(key.kind.as_str(), "Machine" | "MachineHealthCheck") {
            forms.push(Corruption::Negative);
        }
        forms
    }

    fn what(self) -> &'static str {
        match self {
            Corruption::Label | Corruption::Timestamp | Corruption::Missing => "unreadable",
            Corruption::Negative => "an invalid spec",
        }
    }

    /// The field path it writes and the bad value (`null` removes the field).
    fn damage(self, key: &ObjKey, object: &Value) -> (Vec<&'static str>, Value) {
        let v1beta1 = object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.ends_with("/v1beta1"));
        match self {
            Corruption::Label => (vec!["metadata", "labels", CORRUPT_LABEL], json!(17)),
            Corruption::Timestamp => (vec!["metadata", "creationTimestamp"], json!("yesterday")),
            Corruption::Missing => (vec!["spec", "clusterName"], Value::Null),
            Corruption::Negative => match (key.kind.as_str(), v1beta1) {
                ("Machine", false) => (
                    vec!["spec", "deletion", "nodeDrainTimeoutSeconds"],
                    json!(-60),
                ),
                ("Machine", true) => (vec!["spec", "nodeDrainTimeout"], json!("-1m")),
                (_, false) => (
                    vec!["spec", "checks", "nodeStartupTimeoutSeconds"],
                    json!(-600),
                ),
                (_, true) => (vec!["spec", "nodeStartupTimeout"], json!("-10m")),
            },
        }
    }
}

/// `{"a": {"b": value}}` for the path `["a", "b"]`.
fn nested(path: &[&str], value: Value) -> Value {
    path.iter()
        .rev()
        .fold(value, |inner, key| json!({ *key: inner }))
}
