//! `lifecycle explain`: one object's story, told from a replayed journal.
//!
//! *Expected flow*: replay the journal (every input, and the commands each caused) and feed
//! each record, in order, to an [`Explainer`]; it folds them into a [`Story`] — phases with
//! their start and duration, each decision with the record that caused it, what holds the
//! object now and what would unblock it — rendered as text ([`render::text`]) or JSON (the
//! [`Story`] itself).
//!
//! *Guarantees*: a pure function of the records: the same journal gives the same story, and
//! times are the journal's recorded times, never the clock's. Records are read one at a time
//! and not kept, so a long journal costs what its objects and the story's lines cost.

mod build;
mod health;
pub mod html;
mod pool;
pub mod render;
mod unblock;

pub use build::Explainer;
use engine::model::{Kind, ObjectKey, Scope};
use serde::Serialize;
pub use sim::controller_record::ControllerRecord;

/// An object as the command line names it: `Kind/namespace/name`, or `Kind/name` for a
/// cluster-scoped kind, with `@cluster` appended for a workload cluster's object
/// (`Machine/default/m1`, `Pod/app/web-0@c1`, `Node/n1@c1`). The kind is case-insensitive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub cluster: Option<String>,
}

impl Subject {
    /// Parses `Kind/namespace/name[@cluster]` or `Kind/name[@cluster]`.
    pub fn parse(text: &str) -> Result<Subject, String> {
        let usage = || {
            format!(
                "{text:?} is not an object reference: use Kind/namespace/name (Machine/default/m1), Kind/name@cluster for a cluster-scoped kind (Node/n1@c1)"
            )
        };
        let (path, cluster) = match text.split_once('@') {
            Some((p, c)) if !c.is_empty() && !c.contains(['/', '@']) => (p, Some(c.to_string())),
            Some(_) => return Err(usage()),
            None => (text, None),
        };
        let parts: Vec<&str> = path.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(usage());
        }
        match parts.as_slice() {
            [kind, namespace, name] => Ok(Subject {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                cluster,
            }),
            [kind, name] => Ok(Subject {
                kind: kind.to_string(),
                namespace: String::new(),
                name: name.to_string(),
                cluster,
            }),
            _ => Err(usage()),
        }
    }

    /// A management-cluster object of `kind` named `namespace/name`.
    pub fn management(kind: &Kind, namespace_name: &str) -> Result<Subject, String> {
        match namespace_name.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Subject {
                    kind: kind.name().to_string(),
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    cluster: None,
                })
            }
            _ => Err(format!(
                "{namespace_name:?} is not NAMESPACE/NAME (for example default/m1)"
            )),
        }
    }

    pub fn matches(&self, key: &ObjectKey) -> bool {
        let cluster = match &key.scope {
            Scope::Management => None,
            Scope::Workload(c) => Some(c.name.as_str()),
        };
        key.kind.name().eq_ignore_ascii_case(&self.kind)
            && key.namespace.as_str() == self.namespace
            && key.name.as_str() == self.name
            && cluster == self.cluster.as_deref()
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/", self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        write!(f, "{}", self.name)?;
        if let Some(c) = &self.cluster {
            write!(f, "@{c}")?;
        }
        Ok(())
    }
}

/// A journal record, as the story cites it: `#15: observed Node w1@c1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    pub seq: u64,
    pub at: String,
    pub input: String,
}

/// One stretch of the object's life, named after the condition reason the engine wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    pub name: String,
    pub reason: String,
    pub start: String,
    /// Until the next phase began or the object was gone; `None` while it lasts.
    pub end: Option<String>,
    /// Go-style (`1m25s`); for an ongoing phase, up to the journal's last record.
    pub duration: String,
    pub duration_ms: i64,
    pub cause: Cause,
}

/// One thing that happened to the object, and the record that caused it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub at: String,
    /// `observed`, `condition`, `command`, `refused`, `event`, `status`, `verdict`,
    /// `remediation`, `replacement`.
    pub what: &'static str,
    pub text: String,
    /// The command's id (`#7`), for commands and their results.
    pub command: Option<u64>,
    pub controller: Option<&'static str>,
    pub cause: Cause,
    /// How many more times the same line followed (a retry loop), the last at `last_at`.
    pub repeats: u32,
    pub last_at: Option<String>,
}

/// A Machine an MHC judged, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    pub machine: String,
    /// The last `HealthCheckSucceeded` written: `True` or `False (UnhealthyNode): ...`.
    pub verdict: String,
    pub remediation: Option<String>,
    pub replacement: Option<String>,
}

/// What holds the object at the journal's last record, and what would release it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Now {
    pub summary: String,
    pub held_by: Vec<String>,
    pub unblock: Vec<String>,
}

/// The records a story was told from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Span {
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_at: String,
    pub last_at: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Story {
    pub object: String,
    pub journal: Span,
    /// The time the story is told as at: what "now" and ongoing durations refer to.
    pub at: String,
    pub first_seen: Cause,
    pub gone: Option<Cause>,
    pub phases: Vec<Phase>,
    /// For an MHC: each Machine it judged.
    pub targets: Vec<Target>,
    pub entries: Vec<Entry>,
    pub now: Now,
}

/// Why no story could be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExplainError {
    /// The journal never mentions the object.
    Unknown(String),
    /// The journal holds no records.
    Empty,
}

impl std::fmt::Display for ExplainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExplainError::Unknown(s) => write!(
                f,
                "{s}: the journal never observed this object (check the kind, namespace and name; `lifecycle log show` lists what it holds)"
            ),
            ExplainError::Empty => write!(f, "the journal holds no records"),
        }
    }
}

/// Whether `record` concerns `subject`: its input observes the object (alone, in a relist
/// or in a batch), answers a command that targets or is owned by it, or one of the commands
/// it caused does. `issued` holds every command issued before this record.
pub fn concerns(
    record: &ControllerRecord,
    subject: &Subject,
    issued: &std::collections::BTreeMap<u64, engine::Command>,
) -> bool {
    build::input_concerns(&record.input, subject, issued)
        || record
            .commands
            .iter()
            .any(|c| build::command_concerns(c, subject))
}

/// Whether a command targets `subject` or was decided by its reconcile.
pub fn command_concerns(c: &engine::Command, subject: &Subject) -> bool {
    build::command_concerns(c, subject)
}

#[cfg(test)]
mod tests {
    use super::Subject;
    use engine::model::{ClusterName, Kind, ObjectKey, Scope};

    #[test]
    fn a_reference_names_kind_namespace_name_and_cluster() {
        let m1 = Subject::parse("machine/default/m1").unwrap();
        assert!(m1.matches(&ObjectKey::management(Kind::Machine, "default", "m1")));
        assert!(!m1.matches(&ObjectKey::management(Kind::Machine, "other", "m1")));
        let workload = Scope::Workload(ClusterName::new("default", "c1"));
        let node = Subject::parse("Node/n1@c1").unwrap();
        assert!(node.matches(&ObjectKey::new(workload.clone(), Kind::Node, "", "n1")));
        assert!(!node.matches(&ObjectKey::new(Scope::Management, Kind::Node, "", "n1")));
        let pod = Subject::parse("Pod/app/web-0@c1").unwrap();
        assert!(pod.matches(&ObjectKey::new(workload, Kind::Pod, "app", "web-0")));
        assert_eq!(pod.to_string(), "Pod/app/web-0@c1");
        for bad in [
            "m1",
            "Machine//m1",
            "Machine/a/b/c",
            "Node/n1@",
            "Node/n1@c1@c2",
            "",
        ] {
            assert!(Subject::parse(bad).is_err(), "{bad}");
        }
        assert!(Subject::management(&Kind::Machine, "default/m1/x").is_err());
    }

    fn record(seq: u64, input: engine::Input) -> super::ControllerRecord {
        super::ControllerRecord {
            seq,
            at: engine::Timestamp(i64::try_from(seq).unwrap() * 1000),
            input,
            commands: Vec::new(),
            fired: Vec::new(),
            withheld: Default::default(),
            decisions: Vec::new(),
        }
    }

    fn story(
        records: &[super::ControllerRecord],
        name: &str,
    ) -> Result<super::Story, super::ExplainError> {
        let mut explainer =
            super::Explainer::new(Subject::management(&Kind::Machine, name).unwrap());
        for r in records {
            explainer.record(r, &engine::store::Store::default());
        }
        explainer.finish(None)
    }

    #[test]
    fn an_object_recreated_after_it_was_gone_is_not_gone_and_an_unseen_one_is_unknown() {
        use engine::model::Object;
        let m1 = || Box::new(Object::Machine(engine::testing::machine("c1", "m1", None)));
        let records = [
            record(
                1,
                engine::Input::Upsert {
                    scope: Scope::Management,
                    object: m1(),
                },
            ),
            record(
                2,
                engine::Input::Delete {
                    key: ObjectKey::management(Kind::Machine, "default", "m1"),
                },
            ),
            record(
                3,
                engine::Input::Upsert {
                    scope: Scope::Management,
                    object: m1(),
                },
            ),
        ];
        let told = story(&records, "default/m1").unwrap();
        assert_eq!(told.gone, None);
        let lines: Vec<&str> = told.entries.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            lines,
            [
                "first seen",
                "gone: no longer in the API (deleted)",
                "seen again after it was gone (recreated with the same name)"
            ]
        );
        assert_eq!(
            story(&records, "default/m2"),
            Err(super::ExplainError::Unknown("Machine/default/m2".into()))
        );
        assert_eq!(story(&[], "default/m1"), Err(super::ExplainError::Empty));
    }

    /// Found on a real run (its journal has millisecond times): the last phase's duration ran
    /// to a "gone" time rounded to the second, and came out negative.
    #[test]
    fn a_phase_lasts_until_the_object_was_gone_to_the_millisecond() {
        use engine::model::{Condition, ConditionStatus, Object};
        let mut m1 = engine::testing::machine("c1", "m1", None);
        m1.meta.deletion_timestamp = Some(engine::Timestamp(1_000));
        let mut conditions = m1.conditions.clone();
        conditions.current.push(Condition::new(
            "Deleting",
            ConditionStatus::True,
            "DeletionCompleted",
            "Deletion completed",
        ));
        let key = ObjectKey::management(Kind::Machine, "default", "m1");
        let complete = engine::Command {
            id: 1,
            cause: 1,
            controller: engine::ControllerId::Deletion,
            owner: key.clone(),
            action: engine::Action::SetCondition {
                target: engine::Target {
                    key: key.clone(),
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                },
                conditions,
                summary: "Deleting=True (DeletionCompleted)".into(),
            },
            reason: "Deletion completed".into(),
            series: None,
        };
        let records = [
            super::ControllerRecord {
                seq: 1,
                at: engine::Timestamp(1_600),
                input: engine::Input::Upsert {
                    scope: Scope::Management,
                    object: Box::new(Object::Machine(m1)),
                },
                commands: vec![complete],
                fired: Vec::new(),
                withheld: Default::default(),
                decisions: Vec::new(),
            },
            super::ControllerRecord {
                seq: 2,
                at: engine::Timestamp(2_300),
                input: engine::Input::Delete { key },
                commands: Vec::new(),
                fired: Vec::new(),
                withheld: Default::default(),
                decisions: Vec::new(),
            },
        ];
        let told = story(&records, "default/m1").unwrap();
        let durations: Vec<i64> = told.phases.iter().map(|p| p.duration_ms).collect();
        assert_eq!(durations, [700]);
    }

    /// Found on a real run over HTTP: one batch held the Machine's deletion, then the answer
    /// to the write that released its last finalizer. The engine does not take that answer
    /// back into its cache (`engine::keeps_answer`), and the story did not either: it told the
    /// Machine "seen again". The answer to a DELETE of a held object is an observation.
    #[test]
    fn an_answer_is_an_observation_as_the_engine_keeps_it() {
        use engine::model::Object;
        let key = ObjectKey::management(Kind::Machine, "default", "m1");
        let target = engine::Target {
            key: key.clone(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
        };
        let command = |id: u64, action: engine::Action| engine::Command {
            id,
            cause: 1,
            controller: engine::ControllerId::Deletion,
            owner: key.clone(),
            action,
            reason: String::new(),
            series: None,
        };
        let deleting = |finalizers: &[&str]| {
            let mut m1 = engine::testing::machine("c1", "m1", None);
            m1.meta.deletion_timestamp = Some(engine::Timestamp(2_000));
            m1.meta.finalizers = finalizers.iter().map(|f| f.to_string()).collect();
            Box::new(Object::Machine(m1))
        };
        let answer = |command: u64, object| engine::Input::ApiResult {
            command,
            outcome: engine::ApiOutcome::Ok {
                object: Some(object),
            },
        };
        let mut first = record(
            1,
            engine::Input::Upsert {
                scope: Scope::Management,
                object: Box::new(Object::Machine(engine::testing::machine("c1", "m1", None))),
            },
        );
        first.commands = vec![
            command(
                1,
                engine::Action::DeleteMachine {
                    target: target.clone(),
                },
            ),
            command(
                2,
                engine::Action::RemoveFinalizer {
                    target: target.clone(),
                    finalizer: "machine.cluster.x-k8s.io".into(),
                },
            ),
        ];
        let records = [
            first,
            record(2, answer(1, deleting(&["machine.cluster.x-k8s.io"]))),
            record(
                3,
                engine::Input::Batch {
                    inputs: vec![
                        engine::Input::Delete { key: key.clone() },
                        answer(2, deleting(&[])),
                    ],
                },
            ),
        ];
        let told = story(&records, "default/m1").unwrap();
        let lines: Vec<&str> = told.entries.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            lines[3..],
            [
                "deletion requested (deletionTimestamp 1970-01-01T00:00:02Z)",
                "gone: no longer in the API (deleted)"
            ],
            "{lines:?}"
        );
        assert!(told.gone.is_some());
    }
}
