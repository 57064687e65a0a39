//! What the engine is fed. Every input is journaled before it is applied.

use crate::connection::Unreachable;
use crate::model::{Kind, Object, ObjectKey, Scope};
pub use crate::outcome::{ApiOutcome, Withheld};
use serde::{Deserialize, Serialize};

/// One input to [`crate::Engine::handle`].
///
/// Expected failures of the outside world (404, 409, a PDB refusing an eviction, an unreachable
/// cluster) arrive as [`Input::ApiResult`], never as Rust errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// An object was created or changed (a watch event or a list item).
    /// Boxed: an object is about 1 KB, and inputs are moved through queues and batches.
    Upsert { scope: Scope, object: Box<Object> },
    /// An object is gone from the API.
    Delete { key: ObjectKey },
    /// A relist of one cluster finished: `objects` is everything now in it, replacing the cache
    /// for that scope. Also marks the scope's cache as synced.
    Relist { scope: Scope, objects: Vec<Object> },
    /// The result of executing the command with this id.
    ApiResult { command: u64, outcome: ApiOutcome },
    /// Time has advanced to (at least) a deadline the engine asked for.
    Tick,
    /// The controller process restarted: commands that were in flight may never have run.
    Restarted,
    /// Inputs that queued up while the engine was busy, applied in order and then reconciled
    /// together: a key affected by several of them is reconciled once, against the latest
    /// state (what a work queue does with repeated keys). Never nested: build one with
    /// [`Input::batch`] (a nested batch does not decode).
    Batch {
        #[serde(deserialize_with = "unbatched")]
        inputs: Vec<Input>,
    },
    /// The API would not list `kind` in `scope` (it does not serve it, or refuses us: 404,
    /// 403): every object of that kind there is unknown until a list succeeds
    /// (`problem: None`). Unknown, not absent: the decisions that depend on one wait.
    Unlisted {
        scope: Scope,
        kind: Kind,
        problem: Option<String>,
    },
    /// A relist of one kind in one cluster finished (its watch ended, 410 Gone, and it listed
    /// again): `objects` replace the cache's objects of that kind there; every other kind
    /// stays as the watches left it. Otherwise the same as [`Input::Relist`].
    RelistKind {
        scope: Scope,
        kind: Kind,
        objects: Vec<Object>,
    },
    /// `kind` is no longer watched in `scope` (a drain kind no deletion there needs): its
    /// objects are forgotten, and it is unknown there until a [`Input::RelistKind`] of it.
    Unwatched { scope: Scope, kind: Kind },
    /// The connector of workload cluster `scope` could not connect, for `reason`
    /// (`Some`, once per change of reason), or the connection came up after such a failure
    /// (`None`). Unknown, not absent: what waits on the cluster's cache waits as before, and
    /// says why (see [`crate::connection`]).
    ClusterUnreachable {
        scope: Scope,
        reason: Option<Unreachable>,
    },
    /// The process runs in another ownership than the state it resumes (journaled at its start,
    /// so a replay decides as it did; see [`crate::ownership`]).
    Ownership(crate::ownership::Ownership),
    /// The process owns, in takeover, the Machines this selects (`--own-machines`; `None`: a
    /// MachineSet's), journaled like [`Input::Ownership`].
    OwnMachines(Option<crate::model::LabelSelector>),
    /// The operator started the process past a check that refuses a start (`lifecycle run
    /// --capi-manager-stopped`): the check and what it found, journaled so that the replay of
    /// an incident shows who decided to act beside what. Changes no state.
    Overridden { check: String, found: String },
    /// The release Cluster API's manager runs changed (read from its Deployment by the
    /// driver): an unsupported one stops a takeover taking Machines ([`crate::ownership`]).
    CapiRelease(crate::ownership::CapiRelease),
}

/// What a relist ([`Input::Relist`] or [`Input::RelistKind`]) replaced.
#[derive(Clone, Copy, Debug)]
pub struct Relisted<'a> {
    pub scope: &'a Scope,
    /// `None`: every kind of the scope.
    pub kind: Option<&'a Kind>,
    pub objects: &'a [Object],
}

impl Relisted<'_> {
    /// Whether the relist speaks for `key`: listed, or gone if it is not among `objects`.
    pub fn covers(&self, key: &ObjectKey) -> bool {
        key.scope == *self.scope && self.kind.is_none_or(|k| key.kind == *k)
    }
}

/// A batch's inputs decode as [`Unbatched`], the same variants as [`Input`] in the same order
/// (so the same encoding) but no batch: a record cannot nest batches, so decoding one cannot
/// recurse as deep as the record is long.
fn unbatched<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<Input>, D::Error> {
    let inputs = Vec::<Unbatched>::deserialize(deserializer)?;
    Ok(inputs.into_iter().map(Input::from).collect())
}

#[derive(Deserialize)]
#[serde(rename = "Input")]
enum Unbatched {
    Upsert {
        scope: Scope,
        object: Box<Object>,
    },
    Delete {
        key: ObjectKey,
    },
    Relist {
        scope: Scope,
        objects: Vec<Object>,
    },
    ApiResult {
        command: u64,
        outcome: ApiOutcome,
    },
    Tick,
    Restarted,
    /// Holds the place of [`Input::Batch`] so that the variants after it keep their encoding.
    Batch(NoNestedBatch),
    Unlisted {
        scope: Scope,
        kind: Kind,
        problem: Option<String>,
    },
    RelistKind {
        scope: Scope,
        kind: Kind,
        objects: Vec<Object>,
    },
    Unwatched {
        scope: Scope,
        kind: Kind,
    },
    ClusterUnreachable {
        scope: Scope,
        reason: Option<Unreachable>,
    },
    Ownership(crate::ownership::Ownership),
    OwnMachines(Option<crate::model::LabelSelector>),
    Overridden {
        check: String,
        found: String,
    },
    CapiRelease(crate::ownership::CapiRelease),
}

/// Never decodes: a batch inside a batch is a damaged record.
enum NoNestedBatch {}

impl<'de> Deserialize<'de> for NoNestedBatch {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("a batch nested in a batch"))
    }
}

impl From<Unbatched> for Input {
    fn from(u: Unbatched) -> Input {
        match u {
            Unbatched::Upsert { scope, object } => Input::Upsert { scope, object },
            Unbatched::Delete { key } => Input::Delete { key },
            Unbatched::Relist { scope, objects } => Input::Relist { scope, objects },
            Unbatched::ApiResult { command, outcome } => Input::ApiResult { command, outcome },
            Unbatched::Tick => Input::Tick,
            Unbatched::Restarted => Input::Restarted,
            Unbatched::Batch(never) => match never {},
            Unbatched::Unlisted {
                scope,
                kind,
                problem,
            } => Input::Unlisted {
                scope,
                kind,
                problem,
            },
            Unbatched::RelistKind {
                scope,
                kind,
                objects,
            } => Input::RelistKind {
                scope,
                kind,
                objects,
            },
            Unbatched::Unwatched { scope, kind } => Input::Unwatched { scope, kind },
            Unbatched::ClusterUnreachable { scope, reason } => {
                Input::ClusterUnreachable { scope, reason }
            }
            Unbatched::Ownership(o) => Input::Ownership(o),
            Unbatched::OwnMachines(s) => Input::OwnMachines(s),
            Unbatched::Overridden { check, found } => Input::Overridden { check, found },
            Unbatched::CapiRelease(r) => Input::CapiRelease(r),
        }
    }
}

/// The most inputs a driver puts in one [`Input::Batch`]: a bound on the work, and on the
/// commands held back, between two polls (applying 1 024 pod changes takes about 0.3 ms).
pub const BATCH_INPUTS_MAX: usize = 1024;

impl Input {
    /// `inputs` as one input: itself when there is one, a batch otherwise, with the inputs of
    /// any batch among them spliced in.
    pub fn batch(inputs: Vec<Input>) -> Input {
        let mut flat = Vec::with_capacity(inputs.len());
        for input in inputs {
            match input {
                Input::Batch { inputs } => flat.extend(inputs),
                other => flat.push(other),
            }
        }
        if flat.len() == 1 {
            return flat.pop().expect("one input");
        }
        Input::Batch { inputs: flat }
    }

    /// Each command this input answers as not sent ([`ApiOutcome::NotSent`]), a batch's too:
    /// `(command id, why)`.
    pub fn withheld(&self) -> Vec<(u64, Withheld)> {
        match self {
            Input::ApiResult {
                command,
                outcome: ApiOutcome::NotSent { why },
            } => vec![(*command, *why)],
            Input::Batch { inputs } => inputs.iter().flat_map(Input::withheld).collect(),
            _ => Vec::new(),
        }
    }

    /// Each command this input answers with a refusal, a batch's too.
    pub fn refusals(&self) -> Vec<(u64, &crate::Refusal)> {
        match self {
            Input::ApiResult { command, outcome } => outcome
                .refusal()
                .map(|r| (*command, r))
                .into_iter()
                .collect(),
            Input::Batch { inputs } => inputs.iter().flat_map(Input::refusals).collect(),
            _ => Vec::new(),
        }
    }

    /// The relist this input is, if it is one (not looking inside a batch).
    pub fn as_relist(&self) -> Option<Relisted<'_>> {
        match self {
            Input::Relist { scope, objects } => Some(Relisted {
                scope,
                kind: None,
                objects,
            }),
            Input::RelistKind {
                scope,
                kind,
                objects,
            } => Some(Relisted {
                scope,
                kind: Some(kind),
                objects,
            }),
            _ => None,
        }
    }

    /// A one-line description for timelines and `log show`.
    pub fn describe(&self) -> String {
        match self {
            Input::Upsert { scope, object } => format!("observed {}", object.key(scope)),
            Input::Delete { key } => format!("observed deletion of {key}"),
            Input::Relist { scope, objects } => {
                let name = match scope {
                    Scope::Management => "management".to_string(),
                    Scope::Workload(c) => c.name.to_string(),
                };
                format!("relisted {name} ({} objects)", objects.len())
            }
            Input::RelistKind {
                scope,
                kind,
                objects,
            } => {
                let name = match scope {
                    Scope::Management => "management".to_string(),
                    Scope::Workload(c) => c.name.to_string(),
                };
                format!(
                    "relisted {} in {name} ({} objects)",
                    kind.name(),
                    objects.len()
                )
            }
            Input::ApiResult { command, outcome } => {
                format!("result of command #{command}: {}", outcome.summary())
            }
            Input::Tick => "timer".to_string(),
            Input::Restarted => "controller restarted".to_string(),
            Input::Unlisted {
                scope,
                kind,
                problem: Some(problem),
            } => format!(
                "cannot list {} in {}: {problem}",
                kind.name(),
                crate::store::scope_name(scope)
            ),
            Input::Unlisted { scope, kind, .. } => format!(
                "listed {} in {} again",
                kind.name(),
                crate::store::scope_name(scope)
            ),
            Input::Unwatched { scope, kind } => format!(
                "stopped watching {} in {}",
                kind.name(),
                crate::store::scope_name(scope)
            ),
            Input::ClusterUnreachable { scope, reason } => match (scope, reason) {
                (Scope::Workload(c), Some(reason)) => reason.message(c),
                (Scope::Workload(c), None) => {
                    format!("connected to workload cluster {}/{}", c.namespace, c.name)
                }
                (Scope::Management, _) => "the management cluster's connection".to_string(),
            },
            Input::Ownership(o) => format!("runs in {} ownership", o.as_str()),
            Input::OwnMachines(Some(s)) => format!("owns the Machines selected by {s}"),
            Input::OwnMachines(None) => "owns the Machines of MachineSets".to_string(),
            Input::CapiRelease(r) => format!(
                "Cluster API's manager runs {} ({})",
                r.release,
                r.support.as_str()
            ),
            Input::Overridden { check, found } => {
                format!("started past the check {check} by the operator's override: {found}")
            }
            Input::Batch { inputs } => {
                const SHOWN: usize = 3;
                let mut text = format!("batch of {}: ", inputs.len());
                let shown: Vec<String> = inputs.iter().take(SHOWN).map(Input::describe).collect();
                text.push_str(&shown.join("; "));
                if inputs.len() > SHOWN {
                    text.push_str(&format!("; ... ({} more)", inputs.len() - SHOWN));
                }
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, ObjectKey};

    #[test]
    fn a_batch_describes_its_first_inputs_and_how_many_more() {
        let gone = |name: &str| Input::Delete {
            key: ObjectKey::management(Kind::Machine, "default", name),
        };
        let batch = Input::Batch {
            inputs: vec![gone("m1"), Input::Tick, gone("m2"), gone("m3"), gone("m4")],
        };
        assert_eq!(
            batch.describe(),
            "batch of 5: observed deletion of Machine default/m1; timer; \
             observed deletion of Machine default/m2; ... (2 more)"
        );
        let small = Input::Batch {
            inputs: vec![Input::Tick],
        };
        assert_eq!(small.describe(), "batch of 1: timer");
    }

    #[test]
    fn a_batch_round_trips_and_a_nested_batch_is_a_decoding_error() {
        let batch = Input::Batch {
            inputs: vec![
                Input::Tick,
                Input::Delete {
                    key: ObjectKey::management(Kind::Machine, "default", "m1"),
                },
            ],
        };
        let bytes = crate::codec::encode(&batch).unwrap();
        assert_eq!(crate::codec::decode::<Input>(&bytes).unwrap(), batch);
        let nested = Input::Batch {
            inputs: vec![batch.clone()],
        };
        let bytes = crate::codec::encode(&nested).unwrap();
        assert!(crate::codec::decode::<Input>(&bytes).is_err());
        // Built with `Input::batch`, batches are spliced, never nested.
        assert_eq!(Input::batch(vec![batch.clone()]), batch);
        assert_eq!(Input::batch(vec![Input::Tick]), Input::Tick);
    }

    #[test]
    fn a_cluster_unreachable_round_trips_alone_and_in_a_batch_and_says_why() {
        let c1 = crate::model::ClusterName::new("default", "c1");
        let input = |reason: Option<Unreachable>| Input::ClusterUnreachable {
            scope: Scope::Workload(c1.clone()),
            reason,
        };
        let batch = Input::Batch {
            inputs: vec![
                input(Some(Unreachable::SecretMissing)),
                Input::Tick,
                input(None),
            ],
        };
        let unparsable = input(Some(Unreachable::Unparsable {
            error: "line 1: not a map".into(),
        }));
        for input in [unparsable, batch] {
            let bytes = crate::codec::encode(&input).unwrap();
            assert_eq!(crate::codec::decode::<Input>(&bytes).unwrap(), input);
        }
        assert_eq!(
            input(Some(Unreachable::SecretMissing)).describe(),
            "cannot reach workload cluster default/c1: its kubeconfig Secret default/c1-kubeconfig is missing"
        );
        assert_eq!(
            input(None).describe(),
            "connected to workload cluster default/c1"
        );
    }

    /// The variants before it keep their encoding: a journal written before it still decodes.
    #[test]
    fn earlier_variants_keep_their_encoding() {
        let unwatched = Input::Unwatched {
            scope: Scope::Management,
            kind: Kind::Pod,
        };
        // Variant 9 (varint), then the scope (variant 0) and the kind.
        let bytes = crate::codec::encode(&unwatched).unwrap();
        assert_eq!(&bytes[..2], &[9, 0]);
        let unreachable = Input::ClusterUnreachable {
            scope: Scope::Management,
            reason: None,
        };
        assert_eq!(crate::codec::encode(&unreachable).unwrap(), [10, 0, 0]);
    }

    #[test]
    fn an_unlisted_kind_round_trips_alone_and_in_a_batch() {
        let unlisted = |problem: Option<&str>| Input::Unlisted {
            scope: Scope::Management,
            kind: Kind::from_group_kind("infrastructure.cluster.x-k8s.io", "DockerMachine"),
            problem: problem.map(str::to_string),
        };
        let batch = Input::Batch {
            inputs: vec![unlisted(Some("404 Not Found")), Input::Tick, unlisted(None)],
        };
        for input in [unlisted(Some("403 Forbidden")), batch] {
            let bytes = crate::codec::encode(&input).unwrap();
            assert_eq!(crate::codec::decode::<Input>(&bytes).unwrap(), input);
        }
        assert_eq!(
            unlisted(Some("404 Not Found")).describe(),
            "cannot list DockerMachine in the management cluster: 404 Not Found"
        );
        assert_eq!(
            unlisted(None).describe(),
            "listed DockerMachine in the management cluster again"
        );
    }
}
