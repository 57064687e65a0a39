//! A journal whose creation was cut short.
//!
//! Creating a journal writes sled's files (`conf`, `db`, `blobs/`), then sled's first flush
//! (its meta page, the journal's format), then the commit record's two copies. A kill in
//! between leaves files that hold no record and no commit record vouching for one. Refusing
//! them would refuse every restart for good (Kubernetes restarts a killed pod on its own), so
//! a writable open creates the journal again; a read-only one finds no journal.
//!
//! The commit record is the witness that records were written: once either copy exists, or
//! sled holds a batch, a blob or an engine snapshot, the files are a journal and every rule of
//! [`super::inspect`] applies to them.

use super::commit::{self, CopyState};
use super::inspect::{self, BLOBS_DIR, CONF_FILE, DB_FILE};
use super::{JournalError, JournalOptions};
use std::io::Read;
use std::path::Path;

/// Why the files in a journal directory are an interrupted creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interrupted {
    /// sled's data file is missing or holds only zeros: sled never flushed.
    StoreNeverFlushed,
    /// sled flushed, but holds no record, and no commit record was written.
    NoCommitRecord,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interrupted::StoreNeverFlushed => "sled's data file holds nothing yet",
            Interrupted::NoCommitRecord => {
                "sled holds no record and the commit record was never written"
            }
        })
    }
}

/// Whether `dir`'s files are a creation cut short (`None`: they are not, or there are none).
pub(crate) fn interrupted(
    dir: &Path,
    opts: &JournalOptions,
) -> Result<Option<Interrupted>, JournalError> {
    if !dir.is_dir()
        || commit::load_copies(dir)
            .iter()
            .any(|c| !matches!(c, CopyState::Absent))
        || !inspect::store_snapshots(dir)?.is_empty()
        || inspect::files(dir)?
            .iter()
            .any(|p| p.parent().is_some_and(|d| d.ends_with(BLOBS_DIR)))
    {
        return Ok(None);
    }
    let (conf, db) = (dir.join(CONF_FILE), dir.join(DB_FILE));
    if !conf.exists() && !db.exists() {
        return Ok(None);
    }
    if !holds_data(&db)? {
        return Ok(Some(Interrupted::StoreNeverFlushed));
    }
    if !conf.exists() {
        return Ok(None);
    }
    // sled flushed: whatever it holds must be nothing at all.
    let Ok(found) = inspect::inspect(
        dir,
        opts,
        inspect::StoreMode::Inspect,
        inspect::Strictness::Start,
    ) else {
        return Ok(None);
    };
    let snapshots_empty = match &found.snapshots {
        Some(tree) => tree.is_empty(),
        None => true,
    };
    let empty = found.stored_last == 0
        && found.chunks.starts().is_empty()
        && snapshots_empty
        && found.commits.loaded.is_none();
    Ok(empty.then_some(Interrupted::NoCommitRecord))
}

/// Removes what an interrupted creation left, sled's data file first: a kill part way leaves
/// `conf` alone (or nothing), which [`interrupted`] still recognises (a journal of format 5
/// keeps its identity file, stage `Creating`, throughout). The commit record's copies, sled's
/// snapshot and blob files exist only when the identity file vouches for the creation.
pub(crate) fn clear(dir: &Path) -> Result<(), JournalError> {
    let remove = |path: &Path| match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(JournalError::CreateDir {
            dir: path.to_path_buf(),
            source,
        }),
    };
    remove(&dir.join(DB_FILE))?;
    for p in inspect::unfinished_store_snapshots(dir)? {
        remove(&p)?;
    }
    for p in inspect::files(dir)? {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("snap.") || p.parent().is_some_and(|d| d.ends_with(BLOBS_DIR)) {
            remove(&p)?;
        }
    }
    for name in commit::COMMIT_COPIES {
        remove(&dir.join(format!("{name}.new")))?;
        remove(&dir.join(name))?;
    }
    remove(&dir.join(CONF_FILE))
}

/// Whether `path` holds a byte other than zero (a missing file holds none).
fn holds_data(path: &Path) -> Result<bool, JournalError> {
    let unreadable = |source| JournalError::FileUnreadable {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(unreadable(e)),
    };
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut buf).map_err(unreadable)?;
        if n == 0 {
            return Ok(false);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(true);
        }
    }
}
