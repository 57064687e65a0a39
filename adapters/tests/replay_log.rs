//! Replay at start-up: what the controllers log while the journal is replayed says so.
//! (A test binary of its own: tracing's callsite cache is shared by a process's threads, and a
//! test without a subscriber running beside this one would switch its span off.)

use adapters::kube::{InputLog, SledLog};
use engine::model::{Object, Scope};
use engine::{Input, Timestamp, testing};

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bug 4 of the adapter-in-the-simulator issue: replay at start-up logged "Cordoning Node",
/// "Deleting DockerMachine"... at the restart's time, as if they ran again.
#[test]
fn what_replay_logs_says_replayed_and_when_it_happened() {
    let dir = tempfile::tempdir().unwrap();
    let mut m1 = testing::machine("c1", "m1", Some("n1"));
    m1.meta.deletion_timestamp = Some(Timestamp(0));
    let inputs = [
        Input::Relist {
            scope: Scope::Management,
            objects: vec![
                Object::Cluster(testing::cluster("c1")),
                Object::Machine(testing::control_plane_machine("c1", "cp-1", Some("cp-1"))),
                Object::Machine(m1),
                Object::External(testing::infra_machine("m1")),
            ],
        },
        testing::listed(
            testing::workload("c1"),
            vec![
                Object::Node(testing::node("cp-1")),
                Object::Node(testing::node("n1")),
            ],
        ),
    ];
    {
        let (mut log, restored) = SledLog::open(dir.path()).unwrap();
        let mut engine = restored.engine;
        for input in inputs {
            log.append(Timestamp(0), &input).unwrap();
            engine.handle(Timestamp(0), input);
            while engine.poll_command().is_some() {}
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        SledLog::open(dir.path()).unwrap();
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let replayed: Vec<&str> = text.lines().filter(|l| l.contains("replayed{")).collect();
    assert!(
        replayed.iter().any(|l| l.contains("Cordoning Node")),
        "the controllers' lines are there, marked: {text}"
    );
    for line in text.lines() {
        let journal_own = line.contains("engine rebuilt from the journal");
        assert!(
            journal_own || line.contains("replayed{seq="),
            "a line of the replay reads as if it happened now: {line}"
        );
    }
}
