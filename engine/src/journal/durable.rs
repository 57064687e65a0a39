//! Making sled's blob files durable.
//!
//! sled 0.34 stores a value (or a consolidated tree node) larger than a quarter of a segment in
//! its own file under `blobs/`, written with `write_all` but never fsynced: `Db::flush` only
//! makes the log, which points at the blob, durable. A power loss could then keep the pointer
//! and lose the data. With [`super::Durability::Flush`] the vendored sled fsyncs each blob file
//! (and the `blobs/` directory) as it writes it (`Config::sync_blobs`), so a durable pointer
//! always points at durable bytes and a flush reads no directory. With
//! [`super::Durability::Buffered`] an explicit flush fsyncs every blob file created since the
//! last one *before* flushing sled: blob files are named by their log sequence number, which
//! only grows, so "new" means "a larger number than the last one synced".

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

pub(crate) struct BlobSync {
    blobs_dir: PathBuf,
    synced_through: Option<i64>,
}

impl BlobSync {
    /// The scan a flush needs under `durability`: none when sled syncs each blob itself.
    pub(crate) fn for_durability(
        dir: &Path,
        durability: super::Durability,
    ) -> Result<Option<Self>, super::JournalError> {
        if durability == super::Durability::Flush {
            return Ok(None);
        }
        BlobSync::new(dir)
            .map(Some)
            .map_err(|e| super::JournalError::Storage {
                op: "listing blob files",
                source: e.into(),
            })
    }

    /// Starts after the blobs already present (they were synced by whoever wrote them, or are
    /// about to be checked by the caller's recovery).
    pub(crate) fn new(dir: &Path) -> io::Result<Self> {
        let mut sync = BlobSync {
            blobs_dir: dir.join("blobs"),
            synced_through: None,
        };
        sync.synced_through = sync.newer_blobs()?.into_iter().map(|(lsn, _)| lsn).max();
        Ok(sync)
    }

    /// Fsyncs blob files newer than the last call; returns how many.
    pub(crate) fn sync_new(&mut self) -> io::Result<usize> {
        let fresh = self.newer_blobs()?;
        for (lsn, path) in &fresh {
            match File::open(path) {
                Ok(f) => {
                    use std::os::unix::fs::PermissionsExt;
                    f.set_permissions(std::fs::Permissions::from_mode(super::PRIVATE_FILE_MODE))?;
                    f.sync_data()?
                }
                // sled may already have replaced and removed it: nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.synced_through = Some(self.synced_through.map_or(*lsn, |s| s.max(*lsn)));
        }
        if !fresh.is_empty() {
            File::open(&self.blobs_dir)?.sync_all()?;
        }
        Ok(fresh.len())
    }

    fn newer_blobs(&self) -> io::Result<Vec<(i64, PathBuf)>> {
        let entries = match std::fs::read_dir(&self.blobs_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut fresh = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(lsn) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i64>().ok())
            else {
                continue;
            };
            if self.synced_through.is_none_or(|s| lsn > s) {
                fresh.push((lsn, entry.path()));
            }
        }
        Ok(fresh)
    }
}

/// Replaces `dir/name` with `bytes` durably: written to `name.new` (mode 0600), fsynced,
/// renamed over `name`, the directory fsynced. A crash leaves the old file or the new one.
pub(crate) fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fresh = dir.join(format!("{name}.new"));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&fresh)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&fresh, dir.join(name))?;
    File::open(dir).and_then(|d| d.sync_all())
}

/// Whether `dir` takes `bytes` more: a probe file written, fsynced and removed.
pub fn probe_space(dir: &Path, bytes: usize) -> io::Result<()> {
    const PROBE_FILE: &str = ".write-probe";
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(PROBE_FILE);
    let written = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| {
            f.write_all(&vec![0u8; bytes])?;
            f.sync_all()
        });
    let removed = match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    written.and(removed)
}
