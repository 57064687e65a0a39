//! The run's story, one line per event: who did what to which object, and why.

use engine::time::{Duration, Timestamp};
use serde::Serialize;
use std::fmt::Write as _;

/// One timeline line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    /// Simulated milliseconds since the start.
    pub at_ms: i64,
    /// `scenario`, `world`, `api`, `deletion`, `drain`, `health`, `remediation`, `pool`, `invariant`.
    pub actor: String,
    pub action: String,
    pub object: String,
    pub detail: String,
    /// Journal sequence number of the input that caused a controller action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<u64>,
    /// Command id of a controller action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub lines: Vec<Line>,
    /// The controllers' actions as issued, for expectations.
    pub actions: Vec<ActionRecord>,
    /// The Kubernetes Events the controllers emitted.
    pub events: Vec<EventRecord>,
}

/// A controller action as issued, for expectations.
#[derive(Clone, Debug)]
pub struct ActionRecord {
    pub at: Timestamp,
    pub name: &'static str,
    pub target: engine::model::ObjectKey,
    pub command: u64,
}

/// A Kubernetes Event the controllers emitted.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub at: Timestamp,
    pub reason: String,
    pub object: engine::model::ObjectKey,
}

impl Timeline {
    pub fn push(&mut self, line: Line) {
        self.lines.push(line);
    }

    /// Aligned text: `  00:05:00.000  drain        Evict       Pod app/web-0@c1  detail`.
    pub fn render_text(&self) -> String {
        let actor_w = self.lines.iter().map(|l| l.actor.len()).max().unwrap_or(0);
        let action_w = self.lines.iter().map(|l| l.action.len()).max().unwrap_or(0);
        let object_w = self
            .lines
            .iter()
            .map(|l| l.object.len())
            .max()
            .unwrap_or(0)
            .min(48);
        let mut out = String::new();
        for l in &self.lines {
            let mut line = format!(
                "{}  {:<actor_w$}  {:<action_w$}  {:<object_w$}",
                clock(Duration(l.at_ms)),
                l.actor,
                l.action,
                l.object
            );
            if !l.detail.is_empty() {
                let _ = write!(line, "  {}", l.detail.replace('\n', "\n        | "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// One JSON object per line.
    pub fn render_json(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(&serde_json::to_string(l).expect("lines serialize"));
            out.push('\n');
        }
        out
    }
}

/// `HH:MM:SS.mmm` since the start (hours grow past 99 if they must).
pub fn clock(d: Duration) -> String {
    let ms = d.as_millis().max(0);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000
    )
}

/// Offset of `t` from `start`.
pub fn offset(start: Timestamp, t: Timestamp) -> Duration {
    t.since(start)
}
