//! The timeline as one self-contained HTML page: a lane per object, `Deleting` phases as bars,
//! every line as a mark whose hover (SVG `<title>`) or click tells its detail and cause; faults
//! and invariant violations are banded across all lanes.
//!
//! Pure and deterministic: the same timeline gives the same bytes. Nothing is loaded from the
//! network; all text is escaped.

use crate::timeline::{Line, Timeline, clock};
use engine::time::Duration;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The lane of lines that name no object (the run's start, scenario-wide faults).
pub const RUN_LANE: &str = "(run)";

const LABEL_W: i64 = 280;
const AXIS_H: i64 = 34;
const LANE_H: i64 = 28;
const MARK_W: i64 = 9;
const COLUMN_PAD: i64 = 6;
const GAP_PX_MIN: i64 = 6;
const GAP_PX_MAX: i64 = 160;
const GAP_MS_PER_PX: i64 = 100;
const LABEL_SPACING_PX_MIN: i64 = 64;
const RIGHT_MARGIN: i64 = 64;

/// Lane backgrounds, alternating (opaque, so a screenshot shows them exactly).
pub const LANE_COLOURS: [&str; 2] = ["#f4f6f9", "#e6ecf4"];

/// Bar colour of each `Deleting` reason the deletion controller sets; others get [`PHASE_OTHER`].
pub const PHASE_COLOURS: [(&str, &str); 8] = [
    ("WaitingForPreDrainHook", "#f2c14e"),
    ("DrainingNode", "#5b8def"),
    ("WaitingForVolumeDetach", "#9b6bd6"),
    ("WaitingForPreTerminateHook", "#e8964a"),
    ("WaitingForInfrastructureDeletion", "#4cb39a"),
    ("WaitingForBootstrapDeletion", "#8fbf4d"),
    ("WaitingForNodeDeletion", "#c97b9b"),
    ("DeletionCompleted", "#9aa3ad"),
];
pub const PHASE_OTHER: &str = "#b7c4d1";

const ACTOR_COLOURS: [(&str, &str); 9] = [
    ("scenario", "#212529"),
    ("world", "#6c757d"),
    ("api", "#c2255c"),
    ("deletion", "#1864ab"),
    ("drain", "#0b7285"),
    ("health", "#2b8a3e"),
    ("remediation", "#d9480f"),
    ("pool", "#5f3dc4"),
    ("invariant", "#e03131"),
];
const ACTOR_OTHER: &str = "#495057";

/// How a line is highlighted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Highlight {
    Plain,
    /// An injected fault (a `fault:` step or one a sweep drew) or its effect on the world.
    Fault,
    /// An invariant the simulator checks was broken.
    Violation,
}

pub fn highlight(line: &Line) -> Highlight {
    match (line.actor.as_str(), line.action.as_str()) {
        ("invariant", _) => Highlight::Violation,
        ("scenario", "Fault")
        | ("api", "Timeout" | "Malformed")
        | (
            "world",
            "Crash" | "ControllerRestart" | "JournalDamage" | "StuckHook" | "WatchExpired"
            | "Corrupt",
        ) => Highlight::Fault,
        _ => Highlight::Plain,
    }
}

/// A `Deleting=True (<Reason>)` stretch of one object, in lines of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub object: String,
    pub reason: String,
    pub start_ms: i64,
    /// `None`: still in this phase when the timeline ends.
    pub end_ms: Option<i64>,
    /// Index of the line that entered the phase.
    pub line: usize,
}

/// The `Deleting` reason a `SetCondition` line sets: `Some(Some(reason))` for `Deleting=True`,
/// `Some(None)` for `Deleting=False`, `None` when it does not touch `Deleting`.
fn deleting_reason(line: &Line) -> Option<Option<&str>> {
    if line.action != "SetCondition" {
        return None;
    }
    let conditions = line.detail.split(" | ").next().unwrap_or("");
    conditions.split(", ").find_map(|c| {
        if let Some(rest) = c.strip_prefix("Deleting=True (") {
            return Some(Some(rest.strip_suffix(')').unwrap_or(rest)));
        }
        c.starts_with("Deleting=").then_some(None)
    })
}

/// Each object's phases: a phase lasts until the next different reason, or `DeletionCompleted`
/// until the object's last line.
pub fn phases(timeline: &Timeline) -> Vec<Phase> {
    let mut open: BTreeMap<&str, Phase> = BTreeMap::new();
    let mut last_ms: BTreeMap<&str, i64> = BTreeMap::new();
    let mut done = Vec::new();
    for (i, line) in timeline.lines.iter().enumerate() {
        last_ms.insert(&line.object, line.at_ms);
        let Some(reason) = deleting_reason(line) else {
            continue;
        };
        if open
            .get(line.object.as_str())
            .map(|p| Some(p.reason.as_str()))
            == Some(reason)
        {
            continue;
        }
        if let Some(mut phase) = open.remove(line.object.as_str()) {
            phase.end_ms = Some(line.at_ms);
            done.push(phase);
        }
        if let Some(reason) = reason {
            let phase = Phase {
                object: line.object.clone(),
                reason: reason.to_string(),
                start_ms: line.at_ms,
                end_ms: None,
                line: i,
            };
            open.insert(&line.object, phase);
        }
    }
    for (object, mut phase) in open {
        if phase.reason == "DeletionCompleted" {
            phase.end_ms = last_ms.get(object).copied();
        }
        done.push(phase);
    }
    done.sort_by_key(|p| p.line);
    done
}

/// The lanes, in order of first appearance; lines without an object go to [`RUN_LANE`].
pub fn lanes(timeline: &Timeline) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    timeline
        .lines
        .iter()
        .map(lane_of)
        .filter(|l| seen.insert(*l))
        .collect()
}

fn lane_of(line: &Line) -> &str {
    if line.object.is_empty() {
        RUN_LANE
    } else {
        &line.object
    }
}

/// Where each instant sits on the x axis: instants get a column wide enough for their marks,
/// gaps between them are scaled down and capped, so a quiet minute does not push the story
/// off screen.
struct Axis {
    columns: BTreeMap<i64, (i64, i64)>,
    end_x: i64,
}

impl Axis {
    fn new(timeline: &Timeline) -> Axis {
        let mut stack: BTreeMap<(i64, &str), i64> = BTreeMap::new();
        for line in &timeline.lines {
            *stack.entry((line.at_ms, lane_of(line))).or_default() += 1;
        }
        let mut widths: BTreeMap<i64, i64> = BTreeMap::new();
        for ((at_ms, _), n) in stack {
            let w = widths.entry(at_ms).or_default();
            *w = (*w).max(n * MARK_W + COLUMN_PAD);
        }
        let mut columns = BTreeMap::new();
        let mut x = LABEL_W + COLUMN_PAD;
        let mut previous: Option<i64> = None;
        for (at_ms, width) in widths {
            if let Some(p) = previous {
                x += ((at_ms - p) / GAP_MS_PER_PX).clamp(GAP_PX_MIN, GAP_PX_MAX);
            }
            columns.insert(at_ms, (x, width));
            x += width;
            previous = Some(at_ms);
        }
        Axis {
            columns,
            end_x: x + RIGHT_MARGIN,
        }
    }

    fn x(&self, at_ms: i64) -> i64 {
        self.columns.get(&at_ms).map_or(self.end_x, |c| c.0)
    }

    fn x_after(&self, at_ms: i64) -> i64 {
        self.columns.get(&at_ms).map_or(self.end_x, |c| c.0 + c.1)
    }
}

/// Escapes text for HTML content and attribute values alike.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn phase_colour(reason: &str) -> &'static str {
    PHASE_COLOURS
        .iter()
        .find(|(r, _)| *r == reason)
        .map_or(PHASE_OTHER, |(_, c)| c)
}

fn actor_colour(actor: &str) -> &'static str {
    ACTOR_COLOURS
        .iter()
        .find(|(a, _)| *a == actor)
        .map_or(ACTOR_OTHER, |(_, c)| c)
}

fn at(ms: i64) -> String {
    clock(Duration(ms))
}

/// An axis label: `01:25`, `01:25.250`, `1:01:25` past an hour.
fn tick(ms: i64) -> String {
    let full = clock(Duration(ms));
    let full = full.strip_suffix(".000").unwrap_or(&full);
    full.strip_prefix("00:").unwrap_or(full).to_string()
}

fn mark_title(line: &Line) -> String {
    let mut title = format!(
        "{}  {} {}\n{}",
        at(line.at_ms),
        line.actor,
        line.action,
        lane_of(line)
    );
    match (line.command, line.cause) {
        (Some(command), Some(cause)) => {
            let _ = write!(title, "\ncommand #{command}, caused by input #{cause}");
        }
        (None, Some(cause)) => {
            let _ = write!(title, "\ncaused by input #{cause}");
        }
        (Some(command), None) => {
            let _ = write!(title, "\ncommand #{command}");
        }
        (None, None) => {}
    }
    if !line.detail.is_empty() {
        let _ = write!(title, "\n{}", line.detail);
    }
    title
}

const STYLE: &str = "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#212529;background:#fff}\
h1{font-size:18px;margin:0 0 4px}\
.summary{margin:0 0 8px;color:#495057}\
.legend span{display:inline-block;margin:0 12px 4px 0}\
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}\
ul.bad{color:#c92a2a;margin:4px 0 8px}\
svg{display:block}\
svg text{font:12px system-ui,sans-serif;fill:#343a40}\
.lane text.label.bad{fill:#c92a2a;font-weight:bold}\
.mark,.bar{cursor:pointer}\
.mark:hover,.bar:hover{stroke:#000;stroke-width:1.5}\
.mark.fault{stroke:#e8590c;stroke-width:2}\
.mark.violation{stroke:#c92a2a;stroke-width:2}\
.band{pointer-events:none}\
#detail{white-space:pre-wrap;background:#f8f9fa;border:1px solid #dee2e6;padding:8px;min-height:3em}";

/// Click shows a title in the detail box; the counts on `<body>` are what a headless browser
/// test reads back after the page's script ran.
const SCRIPT: &str = "for(const el of document.querySelectorAll('.mark,.bar')){\
el.addEventListener('click',()=>{document.getElementById('detail').textContent=el.querySelector('title').textContent;});}\
document.body.dataset.lanes=document.querySelectorAll('.lane').length;\
document.body.dataset.marks=document.querySelectorAll('.mark').length;\
document.body.dataset.bars=document.querySelectorAll('.bar').length;";

/// The page. `title` heads it (a scenario's file, or the object `explain` follows).
pub fn render(title: &str, timeline: &Timeline) -> String {
    render_with_phases(title, timeline, &phases(timeline))
}

/// The page with the phases given (`explain` knows an object's phases from its story, not
/// from `Deleting` lines). Each phase's `line` indexes `timeline.lines`.
pub fn render_with_phases(title: &str, timeline: &Timeline, phases: &[Phase]) -> String {
    let lanes = lanes(timeline);
    let phases: Vec<&Phase> = phases
        .iter()
        .filter(|p| p.line < timeline.lines.len())
        .collect();
    let axis = Axis::new(timeline);
    let height = AXIS_H + lanes.len() as i64 * LANE_H + 8;
    let end_ms = timeline.lines.last().map_or(0, |l| l.at_ms);
    let flagged: Vec<&Line> = timeline
        .lines
        .iter()
        .filter(|l| highlight(l) != Highlight::Plain)
        .collect();
    let faults = flagged
        .iter()
        .filter(|l| highlight(l) == Highlight::Fault)
        .count();
    let violations = flagged.len() - faults;

    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(out, "<style>{STYLE}</style></head>\n<body>");
    let _ = writeln!(out, "<h1>{}</h1>", escape(title));
    let _ = writeln!(
        out,
        "<p class=\"summary\">{} lines, {} lanes, {} phases, 00:00:00.000 to {}; {} fault line(s), {} invariant violation(s). Hover or click a mark or bar for its detail and cause.</p>",
        timeline.lines.len(),
        lanes.len(),
        phases.len(),
        at(end_ms),
        faults,
        violations
    );
    if !flagged.is_empty() {
        out.push_str("<ul class=\"bad\">\n");
        for line in &flagged {
            let _ = writeln!(
                out,
                "<li>{} {} {} {}: {}</li>",
                at(line.at_ms),
                escape(&line.actor),
                escape(&line.action),
                escape(lane_of(line)),
                escape(&line.detail)
            );
        }
        out.push_str("</ul>\n");
    }
    legend(&mut out, timeline, &phases);

    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" viewBox=\"0 0 {} {height}\">",
        axis.end_x, axis.end_x
    );
    ticks(&mut out, &axis, height);
    for (i, lane) in lanes.iter().enumerate() {
        let y = AXIS_H + i as i64 * LANE_H;
        let bad = timeline
            .lines
            .iter()
            .any(|l| lane_of(l) == *lane && highlight(l) == Highlight::Violation);
        let count = timeline
            .lines
            .iter()
            .filter(|l| lane_of(l) == *lane)
            .count();
        let _ = writeln!(out, "<g class=\"lane\" data-object=\"{}\">", escape(lane));
        let _ = writeln!(
            out,
            "<rect class=\"lane-bg\" x=\"0\" y=\"{y}\" width=\"{}\" height=\"{LANE_H}\" fill=\"{}\"/>",
            axis.end_x,
            LANE_COLOURS[i % LANE_COLOURS.len()]
        );
        let _ = writeln!(
            out,
            "<text class=\"label{}\" x=\"6\" y=\"{}\">{}<title>{} ({count} lines)</title></text>",
            if bad { " bad" } else { "" },
            y + LANE_H / 2 + 4,
            escape(&ellipsis(lane, 38)),
            escape(lane)
        );
        for phase in phases.iter().filter(|p| p.object == *lane) {
            bar(&mut out, &axis, y, phase, &timeline.lines[phase.line]);
        }
        let mut slot: BTreeMap<i64, i64> = BTreeMap::new();
        for line in timeline.lines.iter().filter(|l| lane_of(l) == *lane) {
            let k = slot.entry(line.at_ms).or_default();
            let x = axis.x(line.at_ms) + *k * MARK_W;
            *k += 1;
            mark(&mut out, x, y, line);
        }
        out.push_str("</g>\n");
    }
    for line in &flagged {
        let fill = match highlight(line) {
            Highlight::Violation => "#fa5252",
            Highlight::Fault => "#fd7e14",
            Highlight::Plain => continue,
        };
        let x = axis.x(line.at_ms);
        let _ = writeln!(
            out,
            "<rect class=\"band\" x=\"{}\" y=\"{AXIS_H}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" fill-opacity=\"0.22\"/>",
            x - 2,
            axis.x_after(line.at_ms) - x + 4,
            height - 8 - AXIS_H
        );
    }
    out.push_str("</svg>\n<pre id=\"detail\">Click a mark or a bar.</pre>\n");
    let _ = writeln!(out, "<script>{SCRIPT}</script>\n</body></html>");
    out
}

/// Vertical rules at every instant, labelled where there is room.
fn ticks(out: &mut String, axis: &Axis, height: i64) {
    let mut label_x_min = LABEL_W;
    for (&at_ms, &(x, _)) in &axis.columns {
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ced4da\" stroke-width=\"1\"/>",
            AXIS_H - 6,
            height - 8
        );
        if x >= label_x_min {
            let _ = writeln!(
                out,
                "<text class=\"tick\" x=\"{x}\" y=\"{}\">{}</text>",
                AXIS_H - 10,
                escape(&tick(at_ms))
            );
            label_x_min = x + LABEL_SPACING_PX_MIN;
        }
    }
}

/// A phase's bar: to the column of the next phase, over its own column when it starts and
/// ends at one instant (or is `DeletionCompleted`), to the right edge while still open.
fn bar(out: &mut String, axis: &Axis, y: i64, phase: &Phase, entered: &Line) {
    let x0 = axis.x(phase.start_ms);
    let x1 = phase.end_ms.map_or(axis.end_x, |end| {
        if end == phase.start_ms || phase.reason == "DeletionCompleted" {
            axis.x_after(end)
        } else {
            axis.x(end)
        }
    });
    let until = phase.end_ms.map_or_else(
        || "the end of the timeline".to_string(),
        |end| format!("{} ({})", at(end), Duration(end - phase.start_ms)),
    );
    let _ = writeln!(
        out,
        "<rect class=\"bar\" data-phase=\"{}\" x=\"{x0}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
        escape(&phase.reason),
        y + 3,
        (x1 - x0).max(2),
        LANE_H - 6,
        phase_colour(&phase.reason),
        escape(&format!(
            "Deleting: {}\n{} from {} to {}\n{}",
            phase.reason,
            phase.object,
            at(phase.start_ms),
            until,
            entered.detail
        ))
    );
}

fn mark(out: &mut String, x: i64, y: i64, line: &Line) {
    let class = match highlight(line) {
        Highlight::Plain => "",
        Highlight::Fault => " fault",
        Highlight::Violation => " violation",
    };
    let _ = writeln!(
        out,
        "<rect class=\"mark{class}\" data-actor=\"{}\" data-action=\"{}\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"14\" rx=\"1\" fill=\"{}\"><title>{}</title></rect>",
        escape(&line.actor),
        escape(&line.action),
        y + 7,
        MARK_W - 2,
        actor_colour(&line.actor),
        escape(&mark_title(line))
    );
}

fn legend(out: &mut String, timeline: &Timeline, phases: &[&Phase]) {
    let reasons: BTreeSet<&str> = phases.iter().map(|p| p.reason.as_str()).collect();
    let actors: BTreeSet<&str> = timeline.lines.iter().map(|l| l.actor.as_str()).collect();
    out.push_str("<div class=\"legend\">");
    for reason in reasons {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{}</span>",
            phase_colour(reason),
            escape(reason)
        );
    }
    out.push_str("<br>");
    for actor in actors {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{}</span>",
            actor_colour(actor),
            escape(actor)
        );
    }
    out.push_str("</div>\n");
}

fn ellipsis(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text.to_string();
    }
    let mut short: String = text.chars().take(chars_max - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at_ms: i64, actor: &str, action: &str, object: &str, detail: &str) -> Line {
        Line {
            at_ms,
            actor: actor.into(),
            action: action.into(),
            object: object.into(),
            detail: detail.into(),
            cause: Some(3),
            command: Some(7),
        }
    }

    fn drain_story() -> Timeline {
        let m = "Machine default/m1";
        let mut t = Timeline::default();
        t.push(line(0, "world", "Start", "", "2 objects"));
        t.push(line(60_000, "deletion", "SetCondition", m, "Deleting=True (DrainingNode), DrainingSucceeded=False (Draining) | Drain not completed yet"));
        t.push(line(
            60_000,
            "drain",
            "Evict",
            "Pod app/web-0@c1",
            "draining Node n1",
        ));
        t.push(line(
            65_000,
            "deletion",
            "SetCondition",
            m,
            "Deleting=True (DrainingNode) | still draining",
        ));
        t.push(line(
            85_000,
            "deletion",
            "SetCondition",
            m,
            "Deleting=True (WaitingForInfrastructureDeletion), DrainingSucceeded=True | Waiting",
        ));
        t.push(line(
            105_000,
            "deletion",
            "SetCondition",
            m,
            "Deleting=True (DeletionCompleted) | Deletion completed",
        ));
        t.push(line(
            105_000,
            "deletion",
            "RemoveFinalizer",
            m,
            "machine.cluster.x-k8s.io",
        ));
        t
    }

    #[test]
    fn phases_run_from_each_new_deleting_reason_to_the_next_or_the_objects_end() {
        let got: Vec<(String, i64, Option<i64>)> = phases(&drain_story())
            .into_iter()
            .map(|p| (p.reason, p.start_ms, p.end_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("DrainingNode".to_string(), 60_000, Some(85_000)),
                (
                    "WaitingForInfrastructureDeletion".to_string(),
                    85_000,
                    Some(105_000)
                ),
                ("DeletionCompleted".to_string(), 105_000, Some(105_000)),
            ]
        );
    }

    #[test]
    fn a_phase_still_held_at_the_end_stays_open_and_deleting_false_closes_one() {
        let m = "Machine default/m1";
        let mut t = Timeline::default();
        t.push(line(
            0,
            "deletion",
            "SetCondition",
            m,
            "Deleting=True (WaitingForPreDrainHook) | held",
        ));
        t.push(line(
            9_000,
            "deletion",
            "SetCondition",
            "Machine default/m2",
            "Deleting=True (DrainingNode) | x",
        ));
        t.push(line(
            10_000,
            "deletion",
            "SetCondition",
            "Machine default/m2",
            "Deleting=False | not deleting",
        ));
        let got: Vec<(String, Option<i64>)> = phases(&t)
            .into_iter()
            .map(|p| (p.reason, p.end_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("WaitingForPreDrainHook".to_string(), None),
                ("DrainingNode".to_string(), Some(10_000)),
            ]
        );
    }

    #[test]
    fn one_lane_per_object_and_one_mark_per_line() {
        let t = drain_story();
        let page = render("story", &t);
        assert_eq!(
            lanes(&t),
            [RUN_LANE, "Machine default/m1", "Pod app/web-0@c1"]
        );
        assert_eq!(page.matches("<g class=\"lane\"").count(), 3);
        assert_eq!(page.matches("<rect class=\"mark").count(), t.lines.len());
        assert_eq!(page.matches("<rect class=\"bar\"").count(), 3);
        assert!(page.contains("command #7, caused by input #3"), "{page}");
    }

    #[test]
    fn ticks_drop_what_is_zero() {
        assert_eq!(tick(85_000), "01:25");
        assert_eq!(tick(85_250), "01:25.250");
        assert_eq!(tick(3_685_000), "01:01:25");
    }

    #[test]
    fn the_page_loads_nothing() {
        let page = render("story", &drain_story());
        for reference in [
            "src=", "href=", "url(", "@import", "<link", "<iframe", "fetch(",
        ] {
            assert!(!page.contains(reference), "{reference} in {page}");
        }
        let namespace = "http://www.w3.org/2000/svg";
        assert_eq!(
            page.matches("http").count(),
            page.matches(namespace).count()
        );
    }

    #[test]
    fn same_timeline_same_bytes() {
        assert_eq!(render("a", &drain_story()), render("a", &drain_story()));
    }

    #[test]
    fn script_in_an_object_name_or_message_is_escaped() {
        let mut t = drain_story();
        t.push(line(
            110_000,
            "scenario",
            "Patch",
            "Machine default/<script>alert(1)</script>",
            "\"><script>alert('x')</script>&",
        ));
        let page = render("<script>title</script>", &t);
        assert_eq!(
            page.matches("<script").count(),
            1,
            "only the page's own script: {page}"
        );
        assert!(page.contains("Machine default/&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"));
        assert!(page.contains("<h1>&lt;script&gt;title&lt;/script&gt;</h1>"));
    }

    #[test]
    fn faults_and_violations_are_banded_and_listed() {
        let mut t = drain_story();
        t.push(line(
            70_000,
            "scenario",
            "Fault",
            "",
            "api-errors on c1 for 10s",
        ));
        t.push(line(
            90_000,
            "invariant",
            "Violation",
            "Machine default/m1",
            "finalizer removed early",
        ));
        let page = render("f", &t);
        assert_eq!(page.matches("<rect class=\"band\"").count(), 2);
        assert_eq!(page.matches("<rect class=\"mark fault\"").count(), 1);
        assert_eq!(page.matches("<rect class=\"mark violation\"").count(), 1);
        assert!(page.contains("<text class=\"label bad\""));
        assert!(page.contains("1 fault line(s), 1 invariant violation(s)"));
        assert!(page.contains(
            "<li>00:01:30.000 invariant Violation Machine default/m1: finalizer removed early</li>"
        ));
    }
}
