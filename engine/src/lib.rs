//! engine
pub mod time;
