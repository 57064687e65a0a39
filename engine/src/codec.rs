//! The one place the engine's binary encoding lives.
//!
//! Everything the engine persists (journal payloads, state snapshots) goes through [`encode`] and
//! [`decode`], so the codec can be swapped without touching callers. Today it is bincode 2's
//! serde API with a fixed configuration: standard (varint integers, little-endian) plus a
//! decode size limit, so a corrupt length prefix becomes an error instead of a huge allocation.
//!
//! *Guarantees:* the encoding is deterministic (same value, same bytes on every machine) as long
//! as the value itself is (use `BTreeMap`, never `HashMap`). [`decode`] never panics on bad bytes
//! and rejects trailing bytes.

use serde::{Serialize, de::DeserializeOwned};
use std::fmt;

/// Largest value [`decode`] will materialise, in bytes; larger claims are corrupt data.
pub const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_BYTES_MAX>()
}

/// A value could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Serialisation failed (e.g. a sequence with an unknown length); a programming error.
    Encode(String),
    /// The bytes are not a valid encoding of the requested type.
    Decode(String),
    /// The bytes decoded to a value but `extra_bytes` were left over.
    TrailingBytes { extra_bytes: usize },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Encode(e) => write!(f, "cannot encode value: {e}"),
            CodecError::Decode(e) => write!(f, "cannot decode value: {e}"),
            CodecError::TrailingBytes { extra_bytes } => {
                write!(f, "cannot decode value: {extra_bytes} trailing bytes")
            }
        }
    }
}

impl std::error::Error for CodecError {}

/// Encodes `value` into a fresh buffer.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Appends the encoding of `value` to `out` (reuse `out` to avoid an allocation per value).
///
/// On error `out` may hold a partial encoding after its original length; truncate it if reused.
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    bincode::serde::encode_into_std_write(value, out, config())
        .map(|_| ())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a whole `T` from `bytes`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::TrailingBytes {
            extra_bytes: bytes.len() - used,
        });
    }
    Ok(value)
}

thread_local! {
    /// The state version of the bytes [`decode_layout`] is decoding (`None`: the current one).
    static LAYOUT: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// Decodes `bytes` written with the layout of state version `layout`: the types whose
/// encoding changed read [`layout_before`] and decode the older form they then convert.
pub fn decode_layout<T: DeserializeOwned>(bytes: &[u8], layout: u16) -> Result<T, CodecError> {
    struct Restore(Option<u16>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAYOUT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LAYOUT.with(|l| l.replace(Some(layout))));
    decode(bytes)
}

/// A field that state version `VERSION` added: not in older layouts' bytes, so it decodes as
/// its default there without reading any (`#[serde(deserialize_with = "added_in::<7, _, _>")]`
/// reads oddly, hence the named wrappers).
fn added_in<'de, const VERSION: u16, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    if layout_before(VERSION) {
        Ok(T::default())
    } else {
        T::deserialize(deserializer)
    }
}

/// A field that state version 6 added (see [`added_in`]).
pub fn added_in_6<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<6, D, T>(deserializer)
}

/// A field that state version 7 added (see [`added_in`]).
pub fn added_in_7<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<7, D, T>(deserializer)
}

/// A field that state version 9 added (see [`added_in`]).
pub fn added_in_9<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<9, D, T>(deserializer)
}

/// A field that state version 10 added (see [`added_in`]).
pub fn added_in_10<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<10, D, T>(deserializer)
}

/// A field that state version 11 added (see [`added_in`]).
pub fn added_in_11<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<11, D, T>(deserializer)
}

/// A field that state version 12 added (see [`added_in`]).
pub fn added_in_12<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<12, D, T>(deserializer)
}

/// A field that state version 13 added (see [`added_in`]).
pub fn added_in_13<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    added_in::<13, D, T>(deserializer)
}

/// Whether the value being decoded was written with a state layout older than `version`.
pub fn layout_before(version: u16) -> bool {
    LAYOUT
        .with(|l| l.get())
        .is_some_and(|layout| layout < version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use std::collections::BTreeMap;

    #[test]
    fn round_trips_a_struct() {
        let mut v: BTreeMap<String, (Timestamp, Vec<u8>)> = BTreeMap::new();
        v.insert("m-1".into(), (Timestamp(1_700_000_000_000), vec![1, 2, 3]));
        let bytes = encode(&v).unwrap();
        assert_eq!(
            decode::<BTreeMap<String, (Timestamp, Vec<u8>)>>(&bytes),
            Ok(v)
        );
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let bytes = encode(&(7u32, String::from("abc"))).unwrap();
        assert!(decode::<(u32, String)>(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            decode::<(u32, String)>(&long),
            Err(CodecError::TrailingBytes { extra_bytes: 1 })
        );
        // A length prefix claiming ~2^64 bytes must not allocate.
        assert!(decode::<Vec<u8>>(&[0xff; 9]).is_err());
    }
}
