//! A [`Story`] as text for a terminal: header, phases, targets, story lines, now.

use super::{Entry, Story};
use std::fmt::Write;

/// `00:01:25` when `at` falls on `day` (the journal's first day), the full time otherwise.
fn clock(at: &str, day: &str) -> String {
    match at.split_once('T') {
        Some((d, time)) if d == day => time.trim_end_matches('Z').to_string(),
        _ => at.to_string(),
    }
}

/// Lines of a message after the first, as timelines continue them.
fn continued(out: &mut String, text: &str, indent: usize) {
    for line in text.lines().skip(1) {
        let _ = write!(out, "\n{:indent$}| {line}", "");
    }
}

fn entry_line(out: &mut String, e: &Entry, day: &str) {
    let first = e.text.lines().next().unwrap_or("");
    let command = match (e.command, e.controller) {
        (Some(id), Some(controller)) => format!("#{id} {controller} "),
        _ => String::new(),
    };
    let _ = write!(
        out,
        "  {}  {:<11} {command}{first}",
        clock(&e.at, day),
        e.what
    );
    continued(out, &e.text, 24);
    match e.what {
        "observed" | "refused" | "replacement" => {
            let _ = write!(out, " [#{}]", e.cause.seq);
        }
        _ => {
            let _ = write!(out, " [after #{}: {}]", e.cause.seq, e.cause.input);
        }
    }
    if let Some(last) = &e.last_at {
        let _ = write!(
            out,
            " (and {} more times, the last at {})",
            e.repeats,
            clock(last, day)
        );
    }
    let _ = writeln!(out);
}

pub fn text(story: &Story) -> String {
    let day = story
        .journal
        .first_at
        .split_once('T')
        .map_or("", |(d, _)| d);
    let mut out = String::new();
    let _ = writeln!(out, "{}", story.object);
    let _ = writeln!(
        out,
        "  journal   records {}..{}, {} .. {} (times are the journal's)",
        story.journal.first_seq,
        story.journal.last_seq,
        story.journal.first_at,
        story.journal.last_at
    );
    let _ = writeln!(
        out,
        "  seen      from {} [#{}: {}]",
        story.first_seen.at, story.first_seen.seq, story.first_seen.input
    );
    if let Some(g) = &story.gone {
        let _ = writeln!(out, "  gone      at {} [#{}: {}]", g.at, g.seq, g.input);
    }
    if !story.phases.is_empty() {
        let _ = writeln!(out, "\nPhases");
        for p in &story.phases {
            let lasted = match p.end {
                Some(_) => p.duration.clone(),
                None => format!("{} so far", p.duration),
            };
            let _ = writeln!(
                out,
                "  {}  {lasted:>14}  {}{} [after #{}: {}]",
                clock(&p.start, day),
                p.name,
                if p.reason == p.name {
                    String::new()
                } else {
                    format!(" [{}]", p.reason)
                },
                p.cause.seq,
                p.cause.input
            );
        }
    }
    if !story.targets.is_empty() {
        let _ = writeln!(out, "\nTargets");
        for t in &story.targets {
            let _ = write!(
                out,
                "  {}: {}",
                t.machine,
                t.verdict.lines().next().unwrap_or("")
            );
            continued(&mut out, &t.verdict, 4);
            let _ = writeln!(out);
            if let Some(r) = &t.remediation {
                let _ = writeln!(out, "    remediation: {r}");
            }
            if let Some(r) = &t.replacement {
                let _ = writeln!(out, "    replaced by: {r}");
            }
        }
    }
    let _ = writeln!(out, "\nStory");
    for e in &story.entries {
        entry_line(&mut out, e, day);
    }
    if story.at == story.journal.last_at {
        let _ = writeln!(
            out,
            "\nNow (at record #{}, {})",
            story.journal.last_seq, story.at
        );
    } else {
        let _ = writeln!(
            out,
            "\nNow (at {}; the last record before it is #{})",
            story.at, story.journal.last_seq
        );
    }
    let _ = writeln!(out, "  {}", story.now.summary);
    if !story.now.held_by.is_empty() {
        let _ = writeln!(out, "  held by:");
        for h in &story.now.held_by {
            let _ = write!(out, "    {}", h.lines().next().unwrap_or(""));
            continued(&mut out, h, 6);
            let _ = writeln!(out);
        }
    }
    if !story.now.unblock.is_empty() {
        let _ = writeln!(out, "  to unblock:");
        for u in &story.now.unblock {
            let _ = writeln!(out, "    - {u}");
        }
    }
    out
}
