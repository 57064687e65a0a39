//! A [`Story`] as the simulator's HTML timeline (`explain --html`): the object's lane with its
//! phases as bars, a lane per object its commands touched, every story entry a mark whose
//! hover tells its text and cause. Times count from the journal's first record.

use super::{Entry, Story};
use engine::Timestamp;
use sim::html::Phase;
use sim::timeline::{Line, Timeline};

/// Milliseconds from `origin` to the RFC 3339 time `at` (0 when either does not parse).
fn offset_ms(origin: Option<Timestamp>, at: &str) -> i64 {
    match (origin, Timestamp::parse_rfc3339(at)) {
        (Some(origin), Ok(at)) => at.0 - origin.0,
        _ => 0,
    }
}

/// The object a command entry acts on (`Evict Pod app/web-1@c1: ...` → `Pod app/web-1@c1`),
/// `None` for entries about the subject itself.
fn command_target(entry: &Entry) -> Option<String> {
    if !matches!(entry.what, "command" | "refused") {
        return None;
    }
    let mut words = entry.text.split_whitespace().skip(1);
    let kind = words.next()?;
    let name = words.next()?.trim_end_matches(':');
    kind.starts_with(|c: char| c.is_ascii_uppercase())
        .then(|| format!("{kind} {name}"))
}

fn line_of(story: &Story, origin: Option<Timestamp>, entry: &Entry) -> Line {
    let (object, action, detail) = match command_target(entry) {
        Some(target) => {
            let action = entry.text.split_whitespace().next().unwrap_or(entry.what);
            let action = if entry.what == "refused" {
                format!("{action} refused")
            } else {
                action.to_string()
            };
            (target, action, entry.text.clone())
        }
        None => (
            story.object.clone(),
            entry.what.to_string(),
            entry.text.clone(),
        ),
    };
    let actor = match (entry.controller, entry.what) {
        (Some(controller), _) => controller.to_string(),
        (None, "refused") => "api".to_string(),
        (None, _) => "world".to_string(),
    };
    let mut detail = format!(
        "{detail}\ncause: #{} {}",
        entry.cause.seq, entry.cause.input
    );
    if let Some(last) = &entry.last_at {
        detail.push_str(&format!(
            "\n(and {} more times, the last at {last})",
            entry.repeats
        ));
    }
    Line {
        at_ms: offset_ms(origin, &entry.at),
        actor,
        action,
        object,
        detail,
        cause: Some(entry.cause.seq),
        command: entry.command,
    }
}

/// The story's entries as timeline lines (in story order) and its phases as bars on the
/// subject's lane, each pointing at the first line its cause produced.
pub fn timeline(story: &Story) -> (Timeline, Vec<Phase>) {
    let origin = Timestamp::parse_rfc3339(&story.journal.first_at).ok();
    let mut timeline = Timeline::default();
    for entry in &story.entries {
        timeline.push(line_of(story, origin, entry));
    }
    let phases = story
        .phases
        .iter()
        .map(|phase| {
            let start_ms = offset_ms(origin, &phase.start);
            let line = timeline
                .lines
                .iter()
                .position(|l| l.cause == Some(phase.cause.seq) && l.at_ms >= start_ms)
                .or_else(|| timeline.lines.iter().position(|l| l.at_ms >= start_ms))
                .unwrap_or(0);
            Phase {
                object: story.object.clone(),
                reason: phase.reason.clone(),
                start_ms,
                end_ms: phase.end.as_deref().map(|end| offset_ms(origin, end)),
                line,
            }
        })
        .collect();
    (timeline, phases)
}

/// The self-contained page.
pub fn page(story: &Story) -> String {
    let (timeline, phases) = timeline(story);
    sim::html::render_with_phases(&story.object, &timeline, &phases)
}
