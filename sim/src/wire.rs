//! The faults that hit API calls and deliveries, decided the same way in process and over HTTP.
//!
//! In process the simulator intercepts the controller's commands (`faults.rs`, `network.rs`);
//! over HTTP (`lifecycle sim run --over-http`, `sim serve`) the fake API servers play the same
//! fault windows on the served world's simulated clock, and decide each request's fate with
//! [`roll`] as the simulator does: keyed by what the request hits (seed, fault kind, cluster,
//! verb, resource, name) and the attempt number for that key, never by a running count of all
//! requests, so kube's retries, relists and reconnects over HTTP do not shift the fate of every
//! request after them. [`Wire`] is the state a world's servers share: the windows, the
//! attempt counters, what fired, and the resourceVersions a watch may no longer resume from.
//! It is sans-IO: the servers hand it the time and say what they did.

use crate::scenario::{FaultKind, FaultSpec, Scenario, StepAction};
use engine::ApiOutcome;
use engine::model::Scope;
use engine::outcome::{CAUSE_DISRUPTION_BUDGET, Cause};
use engine::time::{Duration, Timestamp, parse_go_duration};
use std::collections::BTreeMap;

/// The orders in which an answer and its write's watch event reached the controller, counted
/// under delivery faults like fault kinds.
pub const DELIVERY_ORDERS: [&str; 3] = ["result-before-event", "event-before-result", "same-batch"];

/// The delivery fault kinds.
pub const DELIVERY_KINDS: [FaultKind; 6] = [
    FaultKind::ReorderedDelivery,
    FaultKind::CoalescedEvents,
    FaultKind::WatchExpired,
    FaultKind::RelistDuplicates,
    FaultKind::WriteTimeout,
    FaultKind::BacklogBatches,
];

/// The kinds that hit API calls and deliveries (the rest act on the world or the process).
pub const WIRE_KINDS: [FaultKind; 12] = [
    FaultKind::ApiErrors,
    FaultKind::Partition,
    FaultKind::WatchGap,
    FaultKind::Conflicts,
    FaultKind::SlowApi,
    FaultKind::Eviction429,
    FaultKind::ReorderedDelivery,
    FaultKind::CoalescedEvents,
    FaultKind::WatchExpired,
    FaultKind::RelistDuplicates,
    FaultKind::WriteTimeout,
    FaultKind::BacklogBatches,
];

/// Whether a fault kind is played when the controller runs outside the simulator (`sim run
/// --over-http`, `sim serve`): all but `journal-damage` (the simulator's own journal is what it
/// damages). The world's faults and process restarts are played by the live world, the faults
/// of API calls and deliveries by the fake API servers.
pub fn plays_over_http(kind: FaultKind) -> bool {
    kind != FaultKind::JournalDamage
}

/// Default length of a fault window.
pub const FAULT_FOR_DEFAULT: Duration = Duration::from_secs(60);
/// Default delay of a `slow-api` fault.
pub const SLOW_API_DELAY_DEFAULT: Duration = Duration::from_secs(3);
/// Per watch event under `watch-expired`: the chance that the watch ends with 410 instead.
pub const WATCH_EXPIRY_PER_EVENT: f64 = 0.05;
/// How many unchanged objects a watch repeats after a relist under `relist-duplicates`.
pub const DUPLICATES_MAX: usize = 5;
/// Longest a slow consumer's events are held under `coalesced-events`, in ms.
pub const COALESCE_HOLD_MAX_MS: i64 = 1500;
/// The `Retry-After` of an `eviction-429` (the real server's for a PDB still being processed).
pub const EVICTION_RETRY_AFTER_S: u32 = 10;

/// What a request hits, as Kubernetes authorization names it: the verb (`get`, `list`,
/// `watch`, `create`, `update`, `patch`, `delete`), the resource with its API group and
/// subresource (`pods/eviction`, `machines.cluster.x-k8s.io/status`) and the object
/// (`namespace/name`; empty for a collection).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hit {
    pub verb: String,
    pub resource: String,
    pub name: String,
}

impl Hit {
    /// The hit of an HTTP request (`None` for a path that names no resource: discovery,
    /// `/version`, OpenAPI).
    pub fn parse(method: &str, path: &str, watch: bool) -> Option<Hit> {
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, next, ..] if !matches!(*next, "status" | "finalize") => {
                (*ns, &rest[2..])
            }
            _ => ("", rest),
        };
        let named = rest.len() >= 2;
        let verb = match method {
            "GET" | "HEAD" if watch => "watch",
            "GET" | "HEAD" if named => "get",
            "GET" | "HEAD" => "list",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if named => "delete",
            "DELETE" => "deletecollection",
            _ => return None,
        };
        let mut resource = rest[0].to_string();
        if !group.is_empty() {
            resource = format!("{resource}.{group}");
        }
        if let Some(sub) = rest.get(2) {
            resource = format!("{resource}/{sub}");
        }
        let name = match (rest.get(1), namespace) {
            (None, _) => String::new(),
            (Some(n), "") => (*n).to_string(),
            (Some(n), ns) => format!("{ns}/{n}"),
        };
        Some(Hit {
            verb: verb.to_string(),
            resource,
            name,
        })
    }

    /// The hit of a command's (final) request, as the adapter sends it.
    pub fn of_request(request: &engine::convert::ApiRequest) -> Hit {
        Hit::parse(request.method(), &request.path(), false).unwrap_or_else(|| Hit {
            verb: request.method().to_ascii_lowercase(),
            resource: request.path(),
            name: String::new(),
        })
    }

    /// A watcher's request: a `list` or a `watch`.
    pub fn watches(&self) -> bool {
        matches!(self.verb.as_str(), "list" | "watch")
    }

    /// A write: `create`, `update`, `patch`, `delete`.
    pub fn mutating(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// What `conflicts` hits: an update of an object (a patch or a PUT), Events aside (a
    /// repeated Event is a patch over HTTP and a create in process).
    fn updates_object(&self) -> bool {
        matches!(self.verb.as_str(), "patch" | "update")
            && !self.resource.starts_with("events")
            && !self.name.is_empty()
    }

    fn evicts(&self) -> bool {
        self.verb == "create" && self.resource == "pods/eviction"
    }
}

/// How a scope reads in a draw's key.
fn scope_text(scope: &Scope) -> String {
    match scope {
        Scope::Management => "management".to_string(),
        Scope::Workload(c) => format!("{}/{}", c.namespace, c.name),
    }
}

/// A number in [0, 1) decided by (seed, fault kind, cluster, verb, resource, name, attempt)
/// and `salt` alone (a salt tells apart the draws one request makes for one kind).
pub fn roll(seed: u64, kind: FaultKind, scope: &Scope, hit: &Hit, attempt: u64, salt: &str) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    let text = format!(
        "{}|{}|{}|{}|{}|{attempt}|{salt}",
        kind.as_str(),
        scope_text(scope),
        hit.verb,
        hit.resource,
        hit.name
    );
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV leaves a change in the last bytes (the attempt) out of the high bits: mix them in
    // (murmur3's finalizer).
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// A refused request: the answer a fault gives instead of the server's.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub kind: FaultKind,
    pub code: u16,
    /// The `Status` reason (`InternalError`, `ServiceUnavailable`, `TooManyRequests`,
    /// `Conflict`).
    pub reason: &'static str,
    pub message: String,
    /// `Retry-After` in seconds (and `details.retryAfterSeconds`).
    pub retry_after: Option<u32>,
    /// `details.causes[].message` (a PDB's refusal carries one, reason `DisruptionBudget`).
    pub causes: Vec<String>,
}

impl Refusal {
    /// The answer as the adapter reads it (`kube/execute.rs`).
    pub fn outcome(&self) -> ApiOutcome {
        match self.code {
            409 => ApiOutcome::Conflict {
                message: self.message.clone(),
            },
            429 => {
                let causes: Vec<Cause> = self
                    .causes
                    .iter()
                    .map(|message| Cause {
                        reason: CAUSE_DISRUPTION_BUDGET,
                        message,
                    })
                    .collect();
                ApiOutcome::refused(429, self.message.clone(), &causes, self.retry_after)
            }
            code => ApiOutcome::Error {
                code,
                message: self.message.clone(),
            },
        }
    }
}

/// What the faults in effect do to one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass,
    /// The cluster cannot be reached (a partition): no answer at all.
    Unreachable,
    /// Served after this much (simulated) time (a slow API); decided again then.
    Delay(Duration),
    Refuse(Refusal),
}

/// The fault windows in effect, as the decision reads them.
pub trait Active {
    /// The rate and delay of the fault of `kind` in effect for `scope` now.
    fn active(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<(f64, Duration)>;
    /// The run's seed.
    fn seed(&self) -> u64;
}

/// Decides one request's fate, as in process so over HTTP: a partition first (every
/// request), then, for the requests that carry out commands (not a watcher's lists and
/// watches), a slow API (unless the request was held already), injected errors, conflicts on
/// updates and 429s on evictions, each drawn with [`roll`]. `fire` counts each fault that
/// acted.
pub fn decide(
    faults: &impl Active,
    scope: &Scope,
    now: Timestamp,
    hit: &Hit,
    attempt: u64,
    delayed_already: bool,
    fire: &mut dyn FnMut(FaultKind),
) -> Verdict {
    let seed = faults.seed();
    if faults.active(scope, now, FaultKind::Partition).is_some() {
        fire(FaultKind::Partition);
        return Verdict::Unreachable;
    }
    if hit.watches() {
        // Only a partition keeps a watcher's lists and watches from the cluster (the other
        // faults of API calls hit what carries out commands, as in process; the watch streams
        // have faults of their own: gaps, expiry, coalescing, bursts, duplicates).
        return Verdict::Pass;
    }
    if !delayed_already && let Some((_, delay)) = faults.active(scope, now, FaultKind::SlowApi) {
        fire(FaultKind::SlowApi);
        return Verdict::Delay(delay);
    }
    let mut hits = |kind: FaultKind| -> Option<f64> {
        let (rate, _) = faults.active(scope, now, kind)?;
        let r = roll(seed, kind, scope, hit, attempt, "");
        (r < rate.clamp(0.0, 1.0)).then(|| {
            fire(kind);
            roll(seed, kind, scope, hit, attempt, "which")
        })
    };
    if let Some(which) = hits(FaultKind::ApiErrors) {
        return Verdict::Refuse(api_error(which));
    }
    if hit.updates_object() && hits(FaultKind::Conflicts).is_some() {
        return Verdict::Refuse(Refusal {
            kind: FaultKind::Conflicts,
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
                hit.resource.split('/').next().unwrap_or_default(),
                hit.name.rsplit('/').next().unwrap_or_default()
            ),
            retry_after: None,
            causes: Vec::new(),
        });
    }
    if hit.evicts() && hits(FaultKind::Eviction429).is_some() {
        return Verdict::Refuse(Refusal {
            kind: FaultKind::Eviction429,
            code: 429,
            reason: "TooManyRequests",
            message: crate::api::eviction::PDB_VIOLATION.to_string(),
            retry_after: Some(EVICTION_RETRY_AFTER_S),
            causes: vec!["The disruption budget (simulated) needs more healthy pods".to_string()],
        });
    }
    Verdict::Pass
}

/// The answer of an `api-errors` hit: a 500 half the time, else a 503 or a 429 with
/// `Retry-After: 1` (an overloaded server), by `which` in [0, 1).
fn api_error(which: f64) -> Refusal {
    let (code, reason, message, retry_after) = if which < 0.5 {
        (
            500,
            "InternalError",
            "Internal error occurred: simulated API error",
            None,
        )
    } else if which < 0.75 {
        (
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (simulated API error)",
            None,
        )
    } else {
        (
            429,
            "TooManyRequests",
            "Too many requests, please try again later. (simulated API error)",
            Some(1),
        )
    };
    Refusal {
        kind: FaultKind::ApiErrors,
        code,
        reason,
        message: message.to_string(),
        retry_after,
        causes: Vec::new(),
    }
}

/// How a request that timed out after its write happened ends for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// The connection drops: no answer at all.
    Dropped,
    /// The server's request timeout answers 504.
    Answered504,
}

impl Timeout {
    /// The answer as the adapter reads it.
    pub fn outcome(self) -> ApiOutcome {
        match self {
            Timeout::Dropped => ApiOutcome::Unreachable {
                message: "connection closed before message completed (the write happened)".into(),
            },
            Timeout::Answered504 => ApiOutcome::Error {
                code: 504,
                message: TIMEOUT_MESSAGE.into(),
            },
        }
    }
}

/// The real server's 504 message.
pub const TIMEOUT_MESSAGE: &str =
    "Timeout: request did not complete within requested timeout - context deadline exceeded";

/// Whether a write that happened times out (`write-timeout` at `rate`), and how.
pub fn write_timeout(
    seed: u64,
    scope: &Scope,
    hit: &Hit,
    attempt: u64,
    rate: f64,
) -> Option<Timeout> {
    let kind = FaultKind::WriteTimeout;
    if !hit.mutating() || roll(seed, kind, scope, hit, attempt, "") >= rate.clamp(0.0, 1.0) {
        return None;
    }
    Some(if roll(seed, kind, scope, hit, attempt, "how") < 0.5 {
        Timeout::Dropped
    } else {
        Timeout::Answered504
    })
}

/// The cluster a fault applies to: a delivery order without a cluster applies to every
/// cluster (`None`), the other faults of API calls to the management cluster; world faults to
/// every cluster.
pub fn fault_scope(kind: FaultKind, cluster: Option<Scope>) -> Option<Scope> {
    if matches!(
        kind,
        FaultKind::NodeNeverJoins | FaultKind::InfraProvisionFailure
    ) {
        None
    } else if DELIVERY_KINDS.contains(&kind) {
        cluster
    } else {
        Some(cluster.unwrap_or(Scope::Management))
    }
}

/// One fault window on the simulated clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub kind: FaultKind,
    /// `None`: every cluster.
    pub scope: Option<Scope>,
    pub rate: f64,
    pub delay: Duration,
    pub from: Timestamp,
    pub until: Timestamp,
}

impl Window {
    /// The window a fault step opens at `from`.
    pub fn of(spec: &FaultSpec, scope: Option<Scope>, from: Timestamp) -> Window {
        let delay = spec
            .extra
            .get("delay")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| parse_go_duration(s).ok())
            .unwrap_or(SLOW_API_DELAY_DEFAULT);
        Window {
            kind: spec.kind,
            scope,
            rate: spec.rate.unwrap_or(1.0),
            delay,
            from,
            until: from + spec.for_.unwrap_or(FAULT_FOR_DEFAULT),
        }
    }

    fn applies(&self, scope: &Scope) -> bool {
        self.scope.as_ref().is_none_or(|s| s == scope)
    }

    fn open_at(&self, now: Timestamp) -> bool {
        self.from <= now && now < self.until
    }
}

/// The windows of the wire faults a scenario's timeline opens, from `start`, with each
/// workload cluster's scope by the name the scenario gives it.
pub fn windows(
    scenario: &Scenario,
    start: Timestamp,
    workloads: &BTreeMap<String, Scope>,
) -> Vec<Window> {
    scenario
        .timeline
        .iter()
        .filter_map(|step| {
            let StepAction::Fault(spec) = &step.action else {
                return None;
            };
            let unsynced = spec.kind == FaultKind::CacheUnsynced;
            if !WIRE_KINDS.contains(&spec.kind) && !unsynced {
                return None;
            }
            let cluster = step.cluster.as_deref().map(|c| {
                workloads.get(c).cloned().unwrap_or_else(|| {
                    Scope::Workload(engine::model::ClusterName::new("default", c))
                })
            });
            let scope = if unsynced {
                // As in process: without a cluster, the first workload cluster's cache.
                cluster.or_else(|| workloads.values().next().cloned())
            } else {
                fault_scope(spec.kind, cluster)
            };
            Some(Window::of(spec, scope, start + step.at))
        })
        .collect()
}

/// How a watch that expires ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// An in-stream ERROR event (410 `Expired`), then the end of the stream.
    InStream,
    /// The connection drops mid-stream; the resume from the last resourceVersion gets 410.
    Cut,
}

/// What the fake API servers of one world share: the fault windows, the attempt counters,
/// what fired, and the watch state faults leave behind.
#[derive(Debug)]
pub struct Wire {
    pub seed: u64,
    pub windows: Vec<Window>,
    attempts: BTreeMap<(Scope, Hit), u64>,
    /// How often each kind fired (and, under `reordered-delivery`, which order each answer
    /// and its write's watch event took).
    pub fired: BTreeMap<&'static str, u64>,
    /// Per `(cluster, group/Kind)`: a watch resuming from before this resourceVersion gets
    /// 410 (the server lost events after it: a watch gap, or a watch that expired).
    expired_below: BTreeMap<(Scope, String), u64>,
    /// Per `(cluster, group/Kind)`: the highest resourceVersion a watch stream has sent.
    sent: BTreeMap<(Scope, String), u64>,
}

impl Active for Wire {
    fn active(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> Option<(f64, Duration)> {
        self.windows
            .iter()
            .find(|w| w.kind == kind && w.applies(scope) && w.open_at(now))
            .map(|w| (w.rate, w.delay))
    }

    fn seed(&self) -> u64 {
        self.seed
    }
}

impl Wire {
    pub fn new(seed: u64, windows: Vec<Window>) -> Wire {
        Wire {
            seed,
            windows,
            attempts: BTreeMap::new(),
            fired: BTreeMap::new(),
            expired_below: BTreeMap::new(),
            sent: BTreeMap::new(),
        }
    }

    pub fn fire(&mut self, kind: FaultKind) {
        self.fire_named(kind.as_str());
    }

    pub fn fire_named(&mut self, name: &'static str) {
        *self.fired.entry(name).or_default() += 1;
    }

    /// Whether a fault of `kind` is in effect for `scope` now.
    pub fn is_active(&self, scope: &Scope, now: Timestamp, kind: FaultKind) -> bool {
        Active::active(self, scope, now, kind).is_some()
    }

    /// Whether any window applies to `scope` at all (a server with none has nothing to do).
    pub fn touches(&self, scope: &Scope) -> bool {
        self.windows.iter().any(|w| w.applies(scope))
    }

    /// A request arrives: its attempt number for what it hits (0 for the first).
    pub fn arrive(&mut self, scope: &Scope, hit: &Hit) -> u64 {
        let n = self
            .attempts
            .entry((scope.clone(), hit.clone()))
            .or_default();
        let attempt = *n;
        *n += 1;
        attempt
    }

    /// The fate of a request that arrived with `attempt` (see [`decide`]).
    pub fn decide(
        &mut self,
        scope: &Scope,
        now: Timestamp,
        hit: &Hit,
        attempt: u64,
        delayed_already: bool,
    ) -> Verdict {
        let mut fired = Vec::new();
        let verdict = decide(self, scope, now, hit, attempt, delayed_already, &mut |k| {
            fired.push(k)
        });
        for k in fired {
            self.fire(k);
        }
        verdict
    }

    /// Under `cache-unsynced`, until when a list of the cluster is held: the restarted
    /// controller's cache of it syncs only when the fault ends.
    pub fn list_held_until(&self, scope: &Scope, now: Timestamp, hit: &Hit) -> Option<Timestamp> {
        if hit.verb != "list" {
            return None;
        }
        self.windows
            .iter()
            .filter(|w| w.kind == FaultKind::CacheUnsynced && w.applies(scope) && w.open_at(now))
            .map(|w| w.until)
            .max()
    }

    /// Whether a write that happened times out, and how (counted when it does).
    pub fn write_timeout(
        &mut self,
        scope: &Scope,
        now: Timestamp,
        hit: &Hit,
        attempt: u64,
    ) -> Option<Timeout> {
        let (rate, _) = Active::active(self, scope, now, FaultKind::WriteTimeout)?;
        let timeout = write_timeout(self.seed, scope, hit, attempt, rate)?;
        self.fire(FaultKind::WriteTimeout);
        Some(timeout)
    }

    /// Under `reordered-delivery`, how long a write's answer travels (a few milliseconds, a
    /// tenth of them 0.1 to 2 s, as in process).
    pub fn answer_latency(
        &self,
        scope: &Scope,
        now: Timestamp,
        hit: &Hit,
        attempt: u64,
    ) -> Option<Duration> {
        let kind = FaultKind::ReorderedDelivery;
        if !self.is_active(scope, now, kind) || !hit.mutating() {
            return None;
        }
        let r = |salt| roll(self.seed, kind, scope, hit, attempt, salt);
        Some(if r("tail") < 0.1 {
            Duration(100 + (r("ms") * 1900.0) as i64)
        } else {
            Duration(1 + (r("ms") * 80.0) as i64)
        })
    }

    /// A write's answer leaves after its latency: counts whether a watch stream had already
    /// sent the write's event (`event-before-result`, the order the fault makes possible) or
    /// not (`result-before-event`).
    pub fn answered(&mut self, scope: &Scope, stream: &str, resource_version: u64) {
        let sent = self
            .sent
            .get(&(scope.clone(), stream.to_string()))
            .copied()
            .unwrap_or(0);
        let [before, after, _] = DELIVERY_ORDERS;
        if sent >= resource_version {
            self.fire_named(after);
            self.fire(FaultKind::ReorderedDelivery);
        } else {
            self.fire_named(before);
        }
    }

    /// Under `reordered-delivery`, how long a watch stream's next events travel (in order:
    /// a stream never overtakes itself).
    pub fn event_latency(
        &self,
        scope: &Scope,
        now: Timestamp,
        stream: &str,
        n: u64,
    ) -> Option<Duration> {
        let kind = FaultKind::ReorderedDelivery;
        if !self.is_active(scope, now, kind) {
            return None;
        }
        let hit = watch_hit(stream, "");
        Some(Duration(
            1 + (roll(self.seed, kind, scope, &hit, n, "event") * 40.0) as i64,
        ))
    }

    /// A watch stream sent events up to `resource_version`.
    pub fn note_sent(&mut self, scope: &Scope, stream: &str, resource_version: u64) {
        let slot = self
            .sent
            .entry((scope.clone(), stream.to_string()))
            .or_default();
        *slot = (*slot).max(resource_version);
    }

    /// Whether the cluster's watch streams lose their events now (`watch-gap`).
    pub fn gap(&self, scope: &Scope, now: Timestamp) -> bool {
        self.is_active(scope, now, FaultKind::WatchGap)
    }

    /// A watch stream withheld the event at `resource_version` (counted as `watch-gap`): a
    /// watch resuming from before it must relist.
    pub fn withheld(&mut self, scope: &Scope, stream: &str, resource_version: u64) {
        self.fire(FaultKind::WatchGap);
        self.expire_below(scope, stream, resource_version);
    }

    /// Watches of `stream` resuming from before `resource_version` get 410.
    pub fn expire_below(&mut self, scope: &Scope, stream: &str, resource_version: u64) {
        let slot = self
            .expired_below
            .entry((scope.clone(), stream.to_string()))
            .or_default();
        *slot = (*slot).max(resource_version);
    }

    /// Whether a watch of `stream` resuming from `resource_version` must relist (410).
    pub fn resume_expired(&self, scope: &Scope, stream: &str, resource_version: u64) -> bool {
        self.expired_below
            .get(&(scope.clone(), stream.to_string()))
            .is_some_and(|below| resource_version < *below)
    }

    /// Under `watch-expired`, whether the watch ends instead of sending the `n`th event on
    /// `name` (one in twenty), and how.
    pub fn expires_on_event(
        &mut self,
        scope: &Scope,
        now: Timestamp,
        stream: &str,
        name: &str,
        n: u64,
    ) -> Option<Expiry> {
        let kind = FaultKind::WatchExpired;
        if !self.is_active(scope, now, kind) {
            return None;
        }
        let hit = watch_hit(stream, name);
        if roll(self.seed, kind, scope, &hit, n, "") >= WATCH_EXPIRY_PER_EVENT {
            return None;
        }
        self.fire(kind);
        Some(self.expiry(scope, &hit, n))
    }

    /// How a watch ends when a fault makes it expire (drawn per stream and occasion).
    pub fn expiry(&self, scope: &Scope, hit: &Hit, n: u64) -> Expiry {
        if roll(self.seed, FaultKind::WatchExpired, scope, hit, n, "how") < 0.5 {
            Expiry::InStream
        } else {
            Expiry::Cut
        }
    }

    /// Windows of `kind` for `scope` that opened in `(after, now]`.
    pub fn opened(
        &self,
        scope: &Scope,
        kind: FaultKind,
        after: Timestamp,
        now: Timestamp,
    ) -> usize {
        self.windows
            .iter()
            .filter(|w| w.kind == kind && w.applies(scope) && after < w.from && w.from <= now)
            .count()
    }

    /// Windows of `kind` for `scope` that closed in `(after, now]`.
    pub fn closed(
        &self,
        scope: &Scope,
        kind: FaultKind,
        after: Timestamp,
        now: Timestamp,
    ) -> usize {
        self.windows
            .iter()
            .filter(|w| w.kind == kind && w.applies(scope) && after < w.until && w.until <= now)
            .count()
    }

    /// The next moment after `now` a window for `scope` opens or closes.
    pub fn next_boundary(&self, scope: &Scope, now: Timestamp) -> Option<Timestamp> {
        self.windows
            .iter()
            .filter(|w| w.applies(scope))
            .flat_map(|w| [w.from, w.until])
            .filter(|t| *t > now)
            .min()
    }

    /// Under `coalesced-events`, how long a slow consumer's stream holds events before sending
    /// the latest state of each object (0.2 to 1.5 s).
    pub fn coalesce_hold(
        &self,
        scope: &Scope,
        now: Timestamp,
        stream: &str,
        n: u64,
    ) -> Option<Duration> {
        self.stream_hold(
            FaultKind::CoalescedEvents,
            scope,
            now,
            stream,
            n,
            (200, COALESCE_HOLD_MAX_MS),
        )
    }

    /// Under `backlog-batches`, how long a stream holds events before sending them all at once
    /// (0.05 to 0.5 s: the network stalls, then a burst arrives).
    pub fn burst_hold(
        &self,
        scope: &Scope,
        now: Timestamp,
        stream: &str,
        n: u64,
    ) -> Option<Duration> {
        self.stream_hold(FaultKind::BacklogBatches, scope, now, stream, n, (50, 500))
    }

    /// How long `stream` holds its `n`th batch of events under `kind`, drawn in `range_ms`.
    fn stream_hold(
        &self,
        kind: FaultKind,
        scope: &Scope,
        now: Timestamp,
        stream: &str,
        n: u64,
        (from_ms, to_ms): (i64, i64),
    ) -> Option<Duration> {
        if !self.is_active(scope, now, kind) {
            return None;
        }
        let r = roll(self.seed, kind, scope, &watch_hit(stream, ""), n, "hold");
        Some(Duration(from_ms + (r * (to_ms - from_ms) as f64) as i64))
    }

    /// Whether a watch starting after a list repeats objects the list carried now.
    pub fn duplicates(&self, scope: &Scope, now: Timestamp) -> bool {
        self.is_active(scope, now, FaultKind::RelistDuplicates)
    }
}

/// The hit of a watch stream's event (`stream` is `group/Kind`).
pub fn watch_hit(stream: &str, name: &str) -> Hit {
    Hit {
        verb: "watch".to_string(),
        resource: stream.to_string(),
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::ClusterName;

    fn c1() -> Scope {
        Scope::Workload(ClusterName::new("default", "c1"))
    }

    #[test]
    fn requests_are_named_as_authorization_names_them() {
        let hit = |m, p, w| Hit::parse(m, p, w).unwrap();
        assert_eq!(
            hit("POST", "/api/v1/namespaces/app/pods/web-0/eviction", false),
            Hit {
                verb: "create".into(),
                resource: "pods/eviction".into(),
                name: "app/web-0".into()
            }
        );
        assert_eq!(
            hit(
                "PATCH",
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1/status",
                false
            ),
            Hit {
                verb: "patch".into(),
                resource: "machines.cluster.x-k8s.io/status".into(),
                name: "default/m1".into()
            }
        );
        assert_eq!(hit("GET", "/api/v1/nodes", true).verb, "watch");
        assert_eq!(hit("GET", "/api/v1/nodes", false).verb, "list");
        assert_eq!(hit("GET", "/api/v1/nodes/n1", false).verb, "get");
        assert_eq!(hit("PATCH", "/api/v1/nodes/n1", false).name, "n1");
        assert_eq!(Hit::parse("GET", "/apis/cluster.x-k8s.io", false), None);
        assert_eq!(Hit::parse("GET", "/version", false), None);
    }

    #[test]
    fn a_commands_hit_is_the_one_its_http_request_makes() {
        let target = engine::Target {
            key: engine::model::ObjectKey::new(c1(), engine::model::Kind::Pod, "app", "web-0"),
            api_version: "v1".into(),
        };
        let evict = engine::convert::ApiRequest::Evict {
            pod: target,
            grace_period_seconds: None,
        };
        assert_eq!(
            Hit::of_request(&evict),
            Hit::parse("POST", "/api/v1/namespaces/app/pods/web-0/eviction", false).unwrap()
        );
    }

    fn window(kind: FaultKind, scope: Option<Scope>, rate: f64) -> Window {
        Window {
            kind,
            scope,
            rate,
            delay: Duration::from_secs(3),
            from: Timestamp(1_000),
            until: Timestamp(61_000),
        }
    }

    #[test]
    fn a_draw_depends_on_what_it_hits_and_its_attempt_not_on_other_requests() {
        let patch = Hit::parse("PATCH", "/api/v1/nodes/n1", false).unwrap();
        let other = Hit::parse("PATCH", "/api/v1/nodes/n2", false).unwrap();
        let now = Timestamp(2_000);
        let fates = |interleave: bool| {
            let mut wire = Wire::new(7, vec![window(FaultKind::ApiErrors, Some(c1()), 0.5)]);
            (0..40)
                .map(|_| {
                    if interleave {
                        let a = wire.arrive(&c1(), &other);
                        wire.decide(&c1(), now, &other, a, false);
                    }
                    let a = wire.arrive(&c1(), &patch);
                    wire.decide(&c1(), now, &patch, a, false)
                })
                .collect::<Vec<_>>()
        };
        let alone = fates(false);
        assert_eq!(alone, fates(true), "other requests change no fate");
        let refused = alone.iter().filter(|v| **v != Verdict::Pass).count();
        assert!((8..=32).contains(&refused), "about half: {refused}");
    }

    #[test]
    fn windows_apply_to_their_cluster_and_time() {
        let mut wire = Wire::new(1, vec![window(FaultKind::Partition, Some(c1()), 1.0)]);
        let get = Hit::parse("GET", "/api/v1/nodes/n1", false).unwrap();
        assert_eq!(
            wire.decide(&c1(), Timestamp(999), &get, 0, false),
            Verdict::Pass
        );
        assert_eq!(
            wire.decide(&c1(), Timestamp(1_000), &get, 0, false),
            Verdict::Unreachable
        );
        assert_eq!(
            wire.decide(&Scope::Management, Timestamp(1_000), &get, 0, false),
            Verdict::Pass
        );
        assert_eq!(
            wire.decide(&c1(), Timestamp(61_000), &get, 0, false),
            Verdict::Pass
        );
        assert_eq!(wire.fired.get("partition"), Some(&1));
        assert_eq!(
            wire.next_boundary(&c1(), Timestamp(0)),
            Some(Timestamp(1_000))
        );
        assert_eq!(
            wire.next_boundary(&c1(), Timestamp(1_000)),
            Some(Timestamp(61_000))
        );
        assert_eq!(wire.next_boundary(&Scope::Management, Timestamp(0)), None);
    }

    #[test]
    fn conflicts_hit_updates_and_429s_hit_evictions_with_retry_after() {
        let mut wire = Wire::new(
            3,
            vec![
                window(FaultKind::Conflicts, Some(c1()), 1.0),
                window(FaultKind::Eviction429, Some(c1()), 1.0),
            ],
        );
        let now = Timestamp(5_000);
        let get = Hit::parse("GET", "/api/v1/nodes/n1", false).unwrap();
        assert_eq!(wire.decide(&c1(), now, &get, 0, false), Verdict::Pass);
        let cordon = Hit::parse("PATCH", "/api/v1/nodes/n1", false).unwrap();
        let Verdict::Refuse(r) = wire.decide(&c1(), now, &cordon, 0, false) else {
            panic!("a conflict")
        };
        assert_eq!((r.code, r.reason), (409, "Conflict"));
        let event = Hit::parse("PATCH", "/api/v1/namespaces/default/events/e1", false).unwrap();
        assert_eq!(wire.decide(&c1(), now, &event, 0, false), Verdict::Pass);
        let evict =
            Hit::parse("POST", "/api/v1/namespaces/app/pods/web-0/eviction", false).unwrap();
        let Verdict::Refuse(r) = wire.decide(&c1(), now, &evict, 0, false) else {
            panic!("a 429")
        };
        assert_eq!((r.code, r.retry_after), (429, Some(EVICTION_RETRY_AFTER_S)));
        assert!(matches!(
            r.outcome(),
            ApiOutcome::Refused {
                refusal: engine::Refusal::DisruptionBudget { .. },
                ..
            }
        ));
    }

    #[test]
    fn a_watchers_lists_and_watches_meet_only_partitions() {
        let mut wire = Wire::new(
            5,
            vec![
                window(FaultKind::ApiErrors, Some(c1()), 1.0),
                window(FaultKind::SlowApi, Some(c1()), 1.0),
            ],
        );
        let now = Timestamp(2_000);
        for (path, watch) in [("/api/v1/pods", false), ("/api/v1/pods", true)] {
            let hit = Hit::parse("GET", path, watch).unwrap();
            assert_eq!(wire.decide(&c1(), now, &hit, 0, false), Verdict::Pass);
        }
        let get = Hit::parse("GET", "/api/v1/nodes/n1", false).unwrap();
        assert_eq!(
            wire.decide(&c1(), now, &get, 0, false),
            Verdict::Delay(Duration::from_secs(3))
        );
        assert!(matches!(
            wire.decide(&c1(), now, &get, 0, true),
            Verdict::Refuse(_)
        ));
        wire.windows
            .push(window(FaultKind::Partition, Some(c1()), 1.0));
        let list = Hit::parse("GET", "/api/v1/pods", false).unwrap();
        assert_eq!(
            wire.decide(&c1(), now, &list, 0, false),
            Verdict::Unreachable
        );
    }

    #[test]
    fn api_errors_answer_500_503_and_429_with_retry_after() {
        let mut wire = Wire::new(11, vec![window(FaultKind::ApiErrors, None, 1.0)]);
        let mut codes = std::collections::BTreeSet::new();
        let hit = Hit::parse("GET", "/api/v1/nodes/n1", false).unwrap();
        for attempt in 0..100 {
            let Verdict::Refuse(r) = wire.decide(&c1(), Timestamp(2_000), &hit, attempt, false)
            else {
                panic!("rate 1 refuses every request")
            };
            assert_eq!(r.retry_after.is_some(), r.code == 429);
            codes.insert(r.code);
        }
        assert_eq!(codes.into_iter().collect::<Vec<_>>(), vec![429, 500, 503]);
    }

    #[test]
    fn a_watch_resuming_from_before_lost_events_must_relist() {
        let mut wire = Wire::new(1, vec![window(FaultKind::WatchGap, Some(c1()), 1.0)]);
        assert!(wire.gap(&c1(), Timestamp(1_000)));
        assert!(!wire.gap(&Scope::Management, Timestamp(1_000)));
        wire.withheld(&c1(), "/Node", 40);
        assert!(wire.resume_expired(&c1(), "/Node", 39));
        assert!(!wire.resume_expired(&c1(), "/Node", 40));
        assert!(!wire.resume_expired(&c1(), "/Pod", 10));
        assert_eq!(wire.fired.get("watch-gap"), Some(&1));
        assert_eq!(
            wire.closed(
                &c1(),
                FaultKind::WatchGap,
                Timestamp(60_000),
                Timestamp(61_000)
            ),
            1
        );
    }
}
