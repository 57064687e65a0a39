//! Whether a start can write, asked before sled's writable open: sled zero-extends `db` and
//! writes its `snap.*` file as it opens, so a journal it then cannot finish opening (a
//! directory the controller's user cannot write, a full disk) was grown by a start that
//! refused. Every file is opened for writing (nothing written), and a probe file of
//! [`WRITE_PROBE_BYTES`] is written, fsynced and removed: only then may sled open.

use super::JournalError;
use super::inspect;
use std::path::{Path, PathBuf};

/// What the probe writes: more than sled grows a controller's journal by on open (a
/// [`super::SLED_SEGMENT_BYTES`] segment and its snapshot file); as much as the controller's
/// own probe for space after a full disk.
pub(crate) const WRITE_PROBE_BYTES: usize = 64 << 10;

pub(crate) fn check(dir: &Path) -> Result<(), JournalError> {
    let refused = |path: PathBuf, source| JournalError::NotWritable { path, source };
    let unfinished = inspect::unfinished_store_snapshots(dir)?;
    // An unfinished sled snapshot file is removed, never written: its own mode does not matter.
    for path in inspect::files(dir)?
        .into_iter()
        .filter(|p| !unfinished.contains(p))
    {
        if let Err(source) = std::fs::OpenOptions::new().write(true).open(&path) {
            return Err(refused(path, source));
        }
    }
    let blobs = dir.join(inspect::BLOBS_DIR);
    for d in [dir.to_path_buf(), blobs] {
        if d.is_dir() {
            super::durable::probe_space(&d, WRITE_PROBE_BYTES)
                .map_err(|source| refused(d.clone(), source))?;
        }
    }
    Ok(())
}
