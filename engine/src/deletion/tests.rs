//! Engine-level tests of Machine deletion.
