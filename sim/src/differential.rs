//! The differential rule for MachineHealthCheck status: a controller rebuilt from a fresh list
//! of the API as it is now would write no MHC status the API does not already show. Checked
//! when the running controller is idle (no request in flight, nothing queued) and nothing in
//! the world changed for [`QUIET_FOR`], and at the end of the run: a status that stays stale
//! (`expectedMachines`, `currentHealthy`, `targets`, remediations allowed, conditions) after
//! the Machines it counts changed is what a stale cache or a lost update looks like.

use crate::api::FakeApi;
use engine::model::{GroupKind, Kind, Object, Scope};
use engine::remediation::external;
use engine::time::{Duration, Timestamp};
use engine::{Action, Engine, Input};

/// How long the world must be quiet before the check runs.
pub const QUIET_FOR: Duration = Duration::from_secs(30);
/// At most one check per this much simulated time (a fresh engine per check).
const CHECK_EVERY: Duration = Duration::from_mins(1);

#[derive(Clone, Debug, Default)]
pub struct Differential {
    /// When the API last changed.
    pub last_change: Option<Timestamp>,
    /// Whether the quiet period after the last change has been checked.
    checked: bool,
    last_check: Option<Timestamp>,
    /// MHCs already reported (once each).
    reported: std::collections::BTreeSet<String>,
}

impl Differential {
    /// The API changed: a check follows once the world has been quiet for [`QUIET_FOR`].
    pub(crate) fn note_change(&mut self, now: Timestamp) {
        self.last_change = Some(now);
        self.checked = false;
    }
}

impl Differential {
    /// When the world, quiet since its last change, should be checked before `next` (`None`:
    /// it changed within [`QUIET_FOR`] of `next`, was checked, or went quiet before `now`).
    /// No event of its own, so quiet runs stay as they were.
    pub(crate) fn quiet_before(&mut self, now: Timestamp, next: Timestamp) -> Option<Timestamp> {
        let quiet_at = self.last_change.map(|t| t + QUIET_FOR)?;
        if self.checked || quiet_at >= next || quiet_at < now {
            return None;
        }
        self.checked = true;
        Some(quiet_at)
    }

    /// Whether a check is due at `now` (`at_end`: regardless of the quiet period and pacing).
    pub(crate) fn due(&self, now: Timestamp, at_end: bool) -> bool {
        let quiet = self.last_change.is_none_or(|t| now.since(t) >= QUIET_FOR);
        let paced = self.last_check.is_none_or(|t| now.since(t) >= CHECK_EVERY);
        at_end || quiet && paced
    }

    /// The MHCs whose status a controller freshly listing `api` would write, each with what it
    /// would write, reported once each. Nothing while an object does not read: a fresh
    /// controller has no last good reading of it, so it legitimately counts differently.
    /// The stale MHCs among those a controller in `ownership` reconciles (in takeover, the
    /// adopted ones only). What is read is lent to the fresh controller and given back for
    /// the next check, unless this is the `last` (the end of the run).
    pub(crate) fn check(
        &mut self,
        api: &mut FakeApi,
        now: Timestamp,
        ownership: engine::ownership::Ownership,
        last: bool,
    ) -> Vec<(String, String)> {
        let reads = HealthReads::of(api);
        let listed: Vec<(Scope, Vec<Object>)> = api
            .scopes()
            .into_iter()
            .map(|scope| {
                let objects = listed(api, &scope, &reads);
                (scope, objects)
            })
            .collect();
        let unreadable = listed
            .iter()
            .any(|(_, objects)| objects.iter().any(|o| matches!(o, Object::Unreadable(_))));
        if unreadable {
            if !last {
                let keyed = listed.into_iter().flat_map(|(scope, objects)| {
                    objects.into_iter().map(move |o| (o.key(&scope), o))
                });
                give_back(api, keyed);
            }
            return Vec::new();
        }
        self.last_check = Some(now);
        let (writes, fresh) = mhc_status_writes(listed, now, ownership);
        if !last {
            give_back(api, fresh.into_store().into_objects());
        }
        writes
            .into_iter()
            .filter(|(mhc, _)| self.reported.insert(mhc.clone()))
            .collect()
    }
}

/// The MHC status a controller freshly listing `listed` at `now` writes: `(MHC, what)`, and
/// that controller.
fn mhc_status_writes(
    listed: Vec<(Scope, Vec<Object>)>,
    now: Timestamp,
    ownership: engine::ownership::Ownership,
) -> (Vec<(String, String)>, Engine) {
    let mut fresh = Engine::new();
    fresh.handle(now, Input::Ownership(ownership));
    for (scope, objects) in listed {
        fresh.handle(now, Input::Relist { scope, objects });
    }
    let mut writes = Vec::new();
    while let Some(command) = fresh.poll_command() {
        let target = &command.action.target().key;
        let summary = match &command.action {
            Action::PatchStatus { summary, .. } | Action::SetCondition { summary, .. } => summary,
            _ => continue,
        };
        if target.kind == Kind::MachineHealthCheck {
            writes.push((target.to_string(), summary.clone()));
        }
    }
    (writes, fresh)
}

/// Gives the readings a fresh controller borrowed back to the API's stores: the next check
/// lists them without reading or copying them again.
fn give_back(api: &mut FakeApi, objects: impl Iterator<Item = (engine::model::ObjectKey, Object)>) {
    for (key, object) in objects {
        if matches!(object, Object::Unreadable(_)) {
            continue;
        }
        if let Some(store) = api.existing_store_mut(&key.scope) {
            let stored = crate::api::ObjKey::new(
                key.kind.group(),
                key.kind.name(),
                &key.namespace,
                &key.name,
            );
            store.give_back_reading(&stored, object);
        }
    }
}

/// Every object of `scope` the health checks may read ([`HealthReads`]), as a list would
/// return them: the readings already made are taken (see [`give_back`]).
fn listed(api: &mut FakeApi, scope: &Scope, reads: &HealthReads) -> Vec<Object> {
    let Some(store) = api.existing_store_mut(scope) else {
        return Vec::new();
    };
    store
        .read_owned(|k| reads.keeps(k))
        .filter_map(|(_, value, read)| match read {
            Ok(object) => object,
            Err(e) => engine::convert::unreadable_of_json(scope, value, &e),
        })
        .collect()
}

/// The kinds the health checks read. Not those only a drain reads (`Kind::DRAIN_ONLY`: pods
/// and what decides their eviction, the bulk of a workload cluster), and of the kinds the
/// engine does not model, only remediation templates and requests: not the infrastructure
/// and bootstrap objects, a third of the management cluster. Each one left out was most of a
/// check's cost.
struct HealthReads {
    /// The template and request kinds of every MHC's `remediationTemplate`.
    remediation: Vec<GroupKind>,
}

impl HealthReads {
    fn of(api: &FakeApi) -> Self {
        let mhc = Kind::MachineHealthCheck;
        let remediation = api
            .store(&Scope::Management)
            .into_iter()
            .flat_map(|s| s.iter_read(|k| k.kind == mhc.name() && k.group == mhc.group()))
            .filter_map(|(_, _, read)| match read {
                Ok(Some(Object::MachineHealthCheck(m))) => m.remediation_template.as_ref(),
                _ => None,
            })
            .flat_map(|t| {
                let template = GroupKind {
                    group: external::ref_group(t),
                    kind: t.kind.clone(),
                };
                [template, external::request_group_kind(t)]
            })
            .collect();
        HealthReads { remediation }
    }

    fn keeps(&self, key: &crate::api::ObjKey) -> bool {
        match Kind::known(&key.group, &key.kind) {
            Some(kind) => !Kind::DRAIN_ONLY.contains(&kind),
            None => self
                .remediation
                .iter()
                .any(|gk| gk.group == key.group && gk.kind == key.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Sim;

    /// What a fresh controller reads of every cluster, the objects `keep` keeps, with every
    /// MHC's status blanked so that it writes the whole status it computes.
    fn listing(
        api: &FakeApi,
        keep: impl Fn(&crate::api::ObjKey) -> bool,
    ) -> Vec<(Scope, Vec<Object>)> {
        api.scopes()
            .into_iter()
            .map(|scope| {
                let objects = api
                    .store(&scope)
                    .into_iter()
                    .flat_map(|s| s.iter())
                    .filter(|(k, _)| keep(k))
                    .filter_map(|(k, v)| {
                        let mut v = v.clone();
                        if k.kind == "MachineHealthCheck" {
                            v.as_object_mut().map(|o| o.remove("status"));
                        }
                        engine::convert::object_or_unreadable(&scope, &v)
                    })
                    .collect();
                (scope, objects)
            })
            .collect()
    }

    /// A check lends what it reads to the fresh controller and gets it back: afterwards every
    /// object it read keeps its reading, which is what the object reads as (the next check
    /// converts and copies none of them again).
    #[test]
    fn a_check_gives_back_the_readings_it_lent() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/mhc-external-remediation.yaml");
        let scenario = crate::scenario::load(&path).expect("loads");
        let half = scenario.world.start + Duration(scenario.duration.as_millis() / 2);
        let mut sim = Sim::new(scenario, 0, crate::feed::Feeder::new(None));
        sim.setup();
        sim.run_until(half);
        let mut differential = Differential::default();
        differential.check(&mut sim.api, sim.clock.now, Default::default(), false);
        let reads = HealthReads::of(&sim.api);
        let mut kept = 0;
        for scope in sim.api.scopes() {
            let store = sim.api.store(&scope).expect("listed");
            for (key, value) in store.iter().filter(|(k, _)| reads.keeps(k)) {
                let reading = store.kept_reading(key);
                assert_eq!(
                    reading,
                    Some(&engine::convert::object_from_json(value)),
                    "{key}"
                );
                kept += 1;
            }
        }
        assert!(kept >= 10, "only {kept} objects read");
    }

    /// Leaving out the kinds the health checks do not read (those only a drain reads, the
    /// provider objects that are not remediation templates or requests) changes no MHC status
    /// a fresh controller computes: on every scenario with an MHC, halfway and at its end.
    #[test]
    fn the_kinds_left_out_change_no_mhc_status_a_fresh_controller_computes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        let mut writes = 0;
        for path in entries {
            if !std::fs::read_to_string(&path)
                .unwrap()
                .contains("kind: MachineHealthCheck")
            {
                continue;
            }
            let scenario = crate::scenario::load(&path).expect("loads");
            let half = scenario.world.start + Duration(scenario.duration.as_millis() / 2);
            let mut sim = Sim::new(scenario, 0, crate::feed::Feeder::new(None));
            sim.setup();
            for until in [half, sim.clock.end] {
                sim.run_until(until);
                let now = sim.clock.now;
                let (everything, _) =
                    mhc_status_writes(listing(&sim.api, |_| true), now, Default::default());
                let reads = HealthReads::of(&sim.api);
                let (health_kinds, _) = mhc_status_writes(
                    listing(&sim.api, |k| reads.keeps(k)),
                    now,
                    Default::default(),
                );
                assert_eq!(health_kinds, everything, "{}", path.display());
                writes += everything.len();
            }
        }
        assert!(writes >= 20, "only {writes} status writes compared");
    }
}
