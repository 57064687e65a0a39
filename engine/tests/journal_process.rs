//! Journal behaviour across processes: the directory lock, and `kill -9` in the middle of
//! appends. The child is this test binary re-executed with an environment variable.

use engine::journal::{Durability, Journal, JournalError, JournalOptions};
use engine::time::Timestamp;
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const CHILD_ROLE: &str = "JOURNAL_TEST_CHILD_ROLE";
const CHILD_DIR: &str = "JOURNAL_TEST_CHILD_DIR";
const RECORDS_PER_BATCH: usize = 64;
/// The crash child stops on its own after this many batches if nobody kills it.
const CHILD_BATCHES_MAX: u64 = 100_000;

fn payload(seq: u64) -> Vec<u8> {
    let mut p = format!("seq={seq:012};").repeat(22).into_bytes();
    p.truncate(350);
    p
}

fn spawn_child(role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_entry",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, role)
        .env(CHILD_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child test process")
}

/// Reads the child's stdout until `n` lines start with `prefix`; returns their values.
fn wait_for_lines(child: &mut Child, prefix: &str, n: usize) -> Vec<u64> {
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut values = Vec::new();
    let mut line = String::new();
    while values.len() < n {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "child exited early; got {values:?}");
        // The test harness prints `test child_process_entry ... ` without a newline first.
        if let Some(at) = line.find(prefix) {
            values.push(line[at + prefix.len()..].trim().parse().unwrap());
        }
    }
    values
}

/// Entry point of the child process; does nothing in a normal test run.
#[test]
#[ignore = "helper run as a child process by the other tests"]
fn child_process_entry() {
    let (Ok(role), Ok(dir)) = (std::env::var(CHILD_ROLE), std::env::var(CHILD_DIR)) else {
        return;
    };
    let dir = Path::new(&dir);
    let mut out = std::io::stdout();
    match role.as_str() {
        "hold_lock" => {
            let _journal = Journal::open(dir, JournalOptions::default()).unwrap();
            writeln!(out, "ready 1").unwrap();
            out.flush().unwrap();
            // Hold the lock until the parent closes our stdin (or kills us).
            let mut sink = String::new();
            let _ = std::io::stdin().read_line(&mut sink);
        }
        "append_forever" => {
            let opts = JournalOptions {
                durability: Durability::Flush,
                ..JournalOptions::default()
            };
            let (mut journal, _) = Journal::open(dir, opts).unwrap();
            for _ in 0..CHILD_BATCHES_MAX {
                let start = journal.next_seq();
                let owned: Vec<Vec<u8>> = (start..start + RECORDS_PER_BATCH as u64)
                    .map(payload)
                    .collect();
                let entries: Vec<(Timestamp, &[u8])> = owned
                    .iter()
                    .zip(start..)
                    .map(|(p, s)| (Timestamp(s as i64), &p[..]))
                    .collect();
                let range = journal.append_batch(&entries).unwrap();
                writeln!(out, "ack {}", range.end()).unwrap();
                out.flush().unwrap();
            }
        }
        other => panic!("unknown child role {other}"),
    }
}

#[test]
fn journal_open_in_another_process_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = spawn_child("hold_lock", tmp.path());
    wait_for_lines(&mut child, "ready ", 1);
    let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(&err, JournalError::Locked { dir } if dir == tmp.path()),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    drop(child.stdin.take()); // let the child exit
    assert!(child.wait().unwrap().success());
    // The lock dies with its holder.
    Journal::open(tmp.path(), JournalOptions::default()).unwrap();
}

#[test]
fn kill_9_during_appends_loses_no_acknowledged_record() {
    for acks_before_kill in [1usize, 7, 40] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = spawn_child("append_forever", tmp.path());
        let acks = wait_for_lines(&mut child, "ack ", acks_before_kill);
        child.kill().unwrap(); // SIGKILL on unix
        child.wait().unwrap();
        let acked = *acks.last().unwrap();

        let (journal, report) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        let last = journal.last_seq().expect("acknowledged records survive");
        assert!(
            last >= acked,
            "acked {acked} but journal ends at {last} ({report:?})"
        );
        assert_eq!(last % RECORDS_PER_BATCH as u64, 0, "whole batches only");
        let mut next = 1;
        let visited = journal
            .for_each_record(1, |r| {
                assert_eq!(r.seq, next);
                assert_eq!(r.at, Timestamp(r.seq as i64));
                assert_eq!(r.payload, &payload(r.seq)[..]);
                next += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(visited, last);
        let verify = journal.verify();
        assert!(verify.is_clean(), "after kill at ack {acked}: {verify:?}");
        eprintln!(
            "killed after {acks_before_kill} acks: acked {acked}, journal ends at {last}, {report:?}"
        );

        // Appends continue right after the surviving records.
        drop(journal);
        let (mut journal, _) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        let range = journal.append_batch(&[(Timestamp(0), b"after")]).unwrap();
        assert_eq!(*range.start(), last + 1);
    }
}
