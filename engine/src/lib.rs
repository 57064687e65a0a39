//! engine
pub mod codec;
pub mod journal;
pub mod time;
