//! Faults: from timeline `fault:` steps, or drawn per seed by a sweep. Each kind counts how often
//! it fired, so a sweep can prove it was exercised.

use crate::api::{ObjKey, Part};
use crate::event::Event;
use crate::scenario::{FaultKind, FaultSpec};
use crate::sim::Sim;
use crate::wire::{Hit, Verdict};
use engine::connection::Unreachable;
use engine::model::{PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX, Scope};
use engine::time::{Duration, Timestamp, parse_go_duration};
use engine::{ApiOutcome, Input};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label a `corrupt-object` fault gives a number for a value.
const CORRUPT_LABEL: &str = "sim.lifecycle/corrupt";

/// What a `kubeconfig` fault does to the cluster's `<cluster>-kubeconfig` Secret (`problem:`).
pub const KUBECONFIG_PROBLEMS: [&str; 3] = ["missing", "no-value", "unparsable"];

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
    needs_relist: BTreeSet<Scope>,
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
fn damage_roll(seed: u64, now: Timestamp) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in now.as_millis().to_le_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl Faults {
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

fn extra_str<'a>(spec: &'a FaultSpec, key: &str) -> Option<&'a str> {
    spec.extra.get(key).and_then(Value::as_str)
}

fn extra_duration(spec: &FaultSpec, key: &str) -> Option<Duration> {
    extra_str(spec, key).and_then(|s| parse_go_duration(s).ok())
}

impl Sim {
    pub(crate) fn start_fault(&mut self, spec: &FaultSpec, cluster: Option<&str>) {
        if self.process.external.is_some() && !crate::wire::plays_over_http(spec.kind) {
            self.line(
                "scenario",
                "Fault",
                String::new(),
                format!(
                    "{} is not played over HTTP (the controller's journal belongs to its own process)",
                    spec.kind.as_str()
                ),
            );
            return;
        }
        let scope = cluster.map(|c| self.api.workload_scope(c));
        let until = self.clock.now + spec.for_.unwrap_or(crate::wire::FAULT_FOR_DEFAULT);
        match spec.kind {
            FaultKind::ControllerRestart => self.restart_controller(false),
            FaultKind::TornJournal => self.restart_controller(true),
            FaultKind::JournalDamage => self.damage_journal_and_restart(spec),
            FaultKind::CacheUnsynced => {
                let scope = scope.unwrap_or_else(|| self.first_workload());
                self.faults.unsynced.insert(scope.clone());
                self.restart_controller(false);
                self.schedule(until, Event::CacheSynced { scope });
            }
            FaultKind::StuckHook => self.stick_hook(spec),
            FaultKind::Kubeconfig => {
                let scope = scope.unwrap_or_else(|| self.first_workload());
                self.break_kubeconfig(spec, scope, until);
            }
            FaultKind::CorruptObject => {
                let scope = scope.unwrap_or_else(|| self.first_workload());
                if let Some((scope, key)) = self.corruption_target(spec, scope)
                    && let Some(restore) = self.corrupt(&scope, &key, spec)
                {
                    self.schedule(
                        until,
                        Event::Uncorrupt {
                            scope,
                            key,
                            restore,
                        },
                    );
                }
            }
            FaultKind::KubeletStop => {
                let scope = scope.unwrap_or_else(|| self.first_workload());
                if let Some(node) = self.fault_node(spec, &scope) {
                    self.faults.fire(FaultKind::KubeletStop);
                    let (world, mut env) = self.world_env();
                    world.kubelet(&mut env, &scope, &node, false);
                    self.schedule(until, Event::KubeletResume { scope, node });
                }
            }
            FaultKind::NodeFlap => {
                let scope = scope.unwrap_or_else(|| self.first_workload());
                if let Some(node) = self.fault_node(spec, &scope) {
                    let period = extra_duration(spec, "period").unwrap_or(NODE_FLAP_PERIOD_DEFAULT);
                    self.schedule(
                        self.clock.now,
                        Event::NodeFlap {
                            scope,
                            node,
                            period,
                            until,
                            ready: false,
                        },
                    );
                }
            }
            FaultKind::ApiErrors
            | FaultKind::Partition
            | FaultKind::WatchGap
            | FaultKind::Conflicts
            | FaultKind::SlowApi
            | FaultKind::Eviction429
            | FaultKind::NodeNeverJoins
            | FaultKind::InfraProvisionFailure
            | FaultKind::ReorderedDelivery
            | FaultKind::CoalescedEvents
            | FaultKind::WatchExpired
            | FaultKind::RelistDuplicates
            | FaultKind::WriteTimeout
            | FaultKind::BacklogBatches => {
                let scope = crate::wire::fault_scope(spec.kind, scope);
                let window = crate::wire::Window::of(spec, scope.clone(), self.clock.now);
                let id = self.faults.next_id;
                self.faults.next_id += 1;
                self.faults.active.insert(
                    id,
                    ActiveFault {
                        kind: spec.kind,
                        scope: scope.clone(),
                        rate: window.rate,
                        delay: window.delay,
                        until,
                    },
                );
                self.schedule(until, Event::FaultEnds { fault: id });
                if self.process.external.is_some() && crate::wire::WIRE_KINDS.contains(&spec.kind) {
                    // The fake API servers play it, from the same window ([`crate::wire::windows`]).
                    let which = scope.as_ref().map_or_else(
                        || "every fake API server".to_string(),
                        |s| match s {
                            Scope::Management => "the management cluster's fake API server".into(),
                            Scope::Workload(c) => format!("{}'s fake API server", c.name),
                        },
                    );
                    let rate = spec
                        .rate
                        .map(|r| format!(" at rate {r}"))
                        .unwrap_or_default();
                    self.line(
                        "world",
                        "Fault",
                        String::new(),
                        format!(
                            "{} played by {which}{rate} until {}",
                            spec.kind.as_str(),
                            crate::timeline::clock(until.since(self.clock.start))
                        ),
                    );
                    return;
                }
                if matches!(
                    spec.kind,
                    FaultKind::RelistDuplicates | FaultKind::WatchExpired
                ) {
                    let scopes = match &scope {
                        None => self.api.scopes(),
                        Some(s) => vec![s.clone()],
                    };
                    for s in scopes {
                        if spec.kind == FaultKind::WatchExpired {
                            self.expire_watch(&s, None);
                        } else {
                            self.restart_watch(&s);
                        }
                    }
                }
            }
        }
    }

    fn first_workload(&self) -> Scope {
        self.api
            .workloads
            .values()
            .next()
            .cloned()
            .unwrap_or(Scope::Management)
    }

    /// The node a fault names, or one drawn from the seed's stream.
    fn fault_node(&mut self, spec: &FaultSpec, scope: &Scope) -> Option<String> {
        if let Some(n) = extra_str(spec, "node") {
            return Some(n.to_string());
        }
        let nodes: Vec<String> = self
            .api
            .store(scope)?
            .list("", "Node")
            .map(|(k, _)| k.name.clone())
            .collect();
        if nodes.is_empty() {
            return None;
        }
        let i = self.faults.rng.0.random_range(0..nodes.len());
        Some(nodes[i].clone())
    }

    /// The object a `corrupt-object` fault damages: the named Node (`node:`), Machine
    /// (`machine:`), MHC (`mhc:`) or MachinePool (`pool:`), else one drawn from the fault's own
    /// stream: a Node of the cluster half of the time, otherwise a Cluster, Machine, MHC,
    /// MachinePool or provider object of the management cluster.
    fn corruption_target(&mut self, spec: &FaultSpec, workload: Scope) -> Option<(Scope, ObjKey)> {
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
        let management: Vec<ObjKey> = self
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
        let rng = &mut self.faults.corrupt_rng.0;
        if management.is_empty() || rng.random_bool(0.5) {
            let nodes: Vec<ObjKey> = self
                .api
                .store(&workload)?
                .list("", "Node")
                .map(|(k, _)| k.clone())
                .collect();
            let i = self
                .faults
                .corrupt_rng
                .0
                .random_range(0..nodes.len().max(1));
            return nodes.get(i).map(|k| (workload, k.clone()));
        }
        let i = rng.random_range(0..management.len());
        Some((Scope::Management, management[i].clone()))
    }

    /// Damages `key` below validation, as a buggy writer would: a label whose value is a
    /// number, a creation time that does not parse, a required field removed, or a negative
    /// timeout (`form:` picks one, else drawn among those that apply to the kind). Returns the
    /// merge patch that undoes it.
    fn corrupt(&mut self, scope: &Scope, key: &ObjKey, spec: &FaultSpec) -> Option<Value> {
        let original = self.api.get(scope, key)?.clone();
        let forms = Corruption::applicable(key);
        let form = match extra_str(spec, "form").and_then(Corruption::named) {
            Some(form) if forms.contains(&form) => form,
            Some(_) => Corruption::Label,
            None => forms[self.faults.corrupt_rng.0.random_range(0..forms.len())],
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
        let w = self
            .api
            .store_mut(scope)
            .patch(key, &at(bad), Part::Whole)
            .ok()?;
        self.faults.fire(FaultKind::CorruptObject);
        self.line("world", "Corrupt", crate::api::describe(scope, key), detail);
        self.changed(scope, w);
        Some(at(before))
    }

    /// Undoes a corruption: the object reads again.
    pub(crate) fn uncorrupt(&mut self, scope: &Scope, key: &ObjKey, restore: &Value) {
        if self.api.get(scope, key).is_none() {
            return;
        }
        if let Ok(w) = self.api.store_mut(scope).patch(key, restore, Part::Whole) {
            let detail = "readable again".to_string();
            self.line("world", "Corrupt", crate::api::describe(scope, key), detail);
            self.changed(scope, w);
        }
    }

    /// Breaks the cluster's kubeconfig Secret (`problem:`, default `missing`) until `until`, and
    /// restarts the controller: a connection is made when it starts, so the restart is what
    /// meets the broken Secret. The Secret the store holds (served over HTTP, the real one the
    /// controller reads) is deleted, loses its key `value` or gets one that is no kubeconfig;
    /// in-process the simulated connector reports the same.
    fn break_kubeconfig(&mut self, spec: &FaultSpec, scope: Scope, until: Timestamp) {
        let Scope::Workload(cluster) = &scope else {
            return;
        };
        let problem = extra_str(spec, "problem").unwrap_or("missing");
        let name = format!("{}-kubeconfig", cluster.name);
        let key = ObjKey::new("", "Secret", &cluster.namespace, &name);
        let original = self.api.get(&Scope::Management, &key).cloned();
        if original.is_some() {
            let now = self.clock.now;
            let store = self.api.store_mut(&Scope::Management);
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
                self.changed(&Scope::Management, w);
            }
        }
        let reason = kubeconfig_problem(problem);
        self.faults.kubeconfig.insert(scope.clone(), reason.clone());
        self.faults.fire(FaultKind::Kubeconfig);
        let object = format!("Secret {}/{name}", cluster.namespace);
        let detail = format!(
            "{problem} until {}: {}; the controller restarts and cannot connect",
            self.offset_of(until),
            reason.detail(cluster)
        );
        self.line("world", "KubeconfigBroken", object, detail);
        self.restart_controller_as(FaultKind::Kubeconfig);
        self.schedule(until, Event::KubeconfigRestored { scope, original });
    }

    /// A `kubeconfig` fault ends: the Secret is as it was, and a connector still trying connects.
    pub(crate) fn restore_kubeconfig(&mut self, scope: &Scope, original: Option<Value>) {
        let Scope::Workload(cluster) = scope else {
            return;
        };
        self.faults.kubeconfig.remove(scope);
        if let Some(original) = original {
            let now = self.clock.now;
            if let Ok(w) = self.api.store_mut(&Scope::Management).apply(original, now) {
                self.changed(&Scope::Management, w);
            }
        }
        let object = format!("Secret {}/{}-kubeconfig", cluster.namespace, cluster.name);
        self.line(
            "world",
            "KubeconfigRestored",
            object,
            "the controller can connect again".into(),
        );
        if self.process.connecting.remove(scope) {
            self.lp.push(engine::intake::Arrival::Connected {
                scope: scope.clone(),
            });
            self.pump();
        }
    }

    /// A hook whose controller never removes it: added to the named Machine or one drawn from
    /// the seed's stream.
    fn stick_hook(&mut self, spec: &FaultSpec) {
        let machines: Vec<ObjKey> = self
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
        let key = machines[self.faults.rng.0.random_range(0..machines.len())].clone();
        let prefix = match extra_str(spec, "hook") {
            Some("pre-terminate") => PRE_TERMINATE_HOOK_PREFIX,
            _ => PRE_DRAIN_HOOK_PREFIX,
        };
        let annotation = format!("{prefix}/stuck");
        let patch = json!({"metadata": {"annotations": {annotation.clone(): "nobody"}}});
        if let Ok(w) = self
            .api
            .store_mut(&Scope::Management)
            .patch(&key, &patch, Part::Whole)
        {
            self.faults.fire(FaultKind::StuckHook);
            self.line(
                "world",
                "StuckHook",
                key.to_string(),
                format!("{annotation} added; its controller never removes it"),
            );
            self.changed(&Scope::Management, w);
        }
    }

    pub(crate) fn node_flap(
        &mut self,
        scope: Scope,
        node: String,
        period: Duration,
        until: Timestamp,
        ready: bool,
    ) {
        let last = self.clock.now + period >= until;
        let status = if ready || last { "True" } else { "False" };
        self.faults.fire(FaultKind::NodeFlap);
        crate::world::set_node_condition(
            &mut self.env(),
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
            self.schedule_in(
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

    pub(crate) fn fault_ends(&mut self, id: usize) {
        let Some(fault) = self.faults.active.remove(&id) else {
            return;
        };
        // The controller's writes get through again: its retries are due from now on.
        let now = self.clock.now;
        self.checks.invariants.differential.note_change(now);
        let scope_name = fault
            .scope
            .as_ref()
            .map(crate::api::scope_name)
            .unwrap_or_default();
        self.line(
            "world",
            "FaultEnds",
            scope_name,
            format!("{} is over", fault.kind.as_str()),
        );
        if let Some(scope) = &fault.scope
            && matches!(fault.kind, FaultKind::WatchGap | FaultKind::Partition)
            && self.faults.needs_relist.remove(scope)
        {
            self.relist(scope);
        }
    }

    /// A cluster whose cache was held unsynced after a restart finally lists.
    pub(crate) fn cache_synced(&mut self, scope: Scope) {
        if self.faults.unsynced.remove(&scope) {
            self.faults.fire(FaultKind::CacheUnsynced);
            self.faults.needs_relist.remove(&scope);
            self.line(
                "world",
                "CacheSynced",
                crate::api::scope_name(&scope),
                "the controller's cache of this cluster synced".into(),
            );
            self.relist(&scope);
        }
    }

    /// The `journal-damage` fault: the controller dies, its journal is damaged on disk while it
    /// is down (`damage:` in the step, else a kind drawn from the seed), and the restart must
    /// recover every committed record or refuse with an error; the run then goes on from the
    /// intact journal as after a plain restart (see `journal_damage.rs`).
    pub(crate) fn damage_journal_and_restart(&mut self, spec: &FaultSpec) {
        use crate::journal_damage::{DAMAGE_KINDS, RECOVERED, REFUSED};
        self.faults.fire(FaultKind::JournalDamage);
        let roll = damage_roll(self.faults.seed, self.clock.now);
        let kind = match extra_str(spec, "damage") {
            Some(k) if DAMAGE_KINDS.contains(&k) => k,
            Some(k) => {
                self.checks.invariants.violate(format!(
                    "journal-damage: unknown damage {k:?} (expected one of: {})",
                    DAMAGE_KINDS.join(", ")
                ));
                return;
            }
            None => DAMAGE_KINDS[(roll % DAMAGE_KINDS.len() as u64) as usize],
        };
        match self.process.feeder.crash_with_damage(kind, roll >> 3) {
            Ok(Some(report)) => {
                self.faults.fire_order(report.applied);
                self.faults.fire_order(if report.refused.is_some() {
                    REFUSED
                } else {
                    RECOVERED
                });
                if let Some(loss) = report.silent_loss {
                    self.checks.invariants.violate(format!(
                        "journal damage ({}): the restart lost committed records silently: {loss}",
                        report.detail
                    ));
                }
                if let Some(error) = &report.refused
                    && error.contains("is locked")
                {
                    self.checks.invariants.violate(format!(
                        "journal damage ({}): the check could not open the journal: {error}",
                        report.detail
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => {
                self.checks.invariants.violate(format!(
                    "journal damage: the simulator could not damage the journal: {e}"
                ));
                return;
            }
        }
        self.line(
            "world",
            "JournalDamage",
            String::new(),
            format!(
                "while the controller was down its journal was damaged on disk ({kind}); the restart checked it, then ran from an intact copy"
            ),
        );
        self.restart_controller_as(FaultKind::JournalDamage);
    }

    /// The controller process dies and restarts: the engine is rebuilt from its journal, told it
    /// restarted, and relists every cluster whose cache is not held back by a fault. With
    /// `torn`, the crash also loses uncommitted records and tears the last batch.
    pub(crate) fn restart_controller(&mut self, torn: bool) {
        let kind = if torn {
            FaultKind::TornJournal
        } else {
            FaultKind::ControllerRestart
        };
        self.faults.fire(kind);
        self.restart_controller_as(kind);
    }

    /// The restart itself; `kind` says which fault asked for it (counted by the caller).
    fn restart_controller_as(&mut self, kind: FaultKind) {
        let torn = kind == FaultKind::TornJournal;
        if let Some(external) = &mut self.process.external {
            external.restarts += 1;
            self.line(
                "scenario",
                "Fault",
                String::new(),
                "the controller process is killed (SIGKILL) and restarted from its journal".into(),
            );
            return;
        }
        let before = self.engine().state_hash();
        let mut lost_from = None;
        if torn {
            match self.process.feeder.crash_with_torn_tail() {
                Ok(lost) => lost_from = lost,
                Err(e) => {
                    self.checks.invariants.violate(format!(
                        "recovery: the journal cannot be reopened after a crash: {e}"
                    ));
                    return;
                }
            }
        }
        let rebuilt = match self.process.feeder.rebuild(self.lp.core()) {
            Ok(engine) => engine,
            Err(e) => {
                self.checks.invariants.violate(format!(
                    "recovery: the engine cannot be rebuilt from its journal: {e}"
                ));
                return;
            }
        };
        self.process.feeder.truncate_to(rebuilt.applied_seq());
        self.checks
            .invariants
            .repeats
            .forget_after(rebuilt.applied_seq());
        let after = rebuilt.state_hash();
        if !torn && before != after {
            self.checks.invariants.violate(format!(
                "recovery: the engine rebuilt from its journal differs from the live one ({before:016x} vs {after:016x})"
            ));
        }
        let detail = match lost_from {
            Some(seq) => format!(
                "crash tore the journal's tail: records from #{seq} lost; engine rebuilt from the journal; relisting"
            ),
            None => "engine rebuilt from the journal; relisting".to_string(),
        };
        self.line(
            "world",
            if torn { "Crash" } else { "ControllerRestart" },
            String::new(),
            detail,
        );
        // Commands still queued died with the process, and its caches with it.
        self.clock
            .work
            .retain(|w| !matches!(w, crate::event::Work::Command(_)));
        self.net.reset();
        self.checks.invariants.synced.clear();
        self.start_controller(rebuilt);
        self.feed(Input::Restarted);
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
