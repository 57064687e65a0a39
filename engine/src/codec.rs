//! The one place that knows the binary encoding (bincode 2, standard config, via serde), so the
//! codec can be swapped without touching callers.

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot decode: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a value. Encoding our own types cannot fail (no maps with non-string keys that
/// bincode rejects, no `deserialize_any`), so a failure is a programmer error.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("engine types always encode")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| CodecError(e.to_string()))?;
    if read != bytes.len() {
        return Err(CodecError(format!(
            "{} trailing bytes after the value",
            bytes.len() - read
        )));
    }
    Ok(value)
}
