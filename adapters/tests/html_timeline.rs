//! `lifecycle sim run FILE --html OUT.html`, opened in headless Chromium (Debian's `chromium`):
//! the DOM after the page's script ran has one lane per object of the timeline, one mark per
//! line (per action name too) and one bar per `Deleting` phase; the screenshot shows the lane
//! and phase colours. A missing chromium fails, never skips.

mod common;
mod png;

use common::required_tool;
use sim::timeline::Timeline;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCENARIO: &str = "scenarios/deletion-pdb-blocks-until-rescheduled.yaml";
const INSTALL: &str = ".ci/install-clients (run by the tests themselves: apt-get install -y chromium) did not install it";
const CHROMIUM_WAIT_MAX: Duration = Duration::from_secs(25);
const WINDOW: (usize, usize) = (1200, 410);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$CHROMIUM`, else `chromium` on PATH (`.ci/install-clients`, run first, installs it).
fn chromium() -> PathBuf {
    common::clients_dir();
    required_tool(
        "CHROMIUM",
        PathBuf::from("chromium"),
        &["--version"],
        "Chromium",
        INSTALL,
    )
}

/// Runs headless Chromium on `page` with `extra` flags; its stdout.
fn headless(chromium: &Path, profile: &Path, page: &Path, extra: &[String]) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args([
            "--force-color-profile=srgb",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}: {INSTALL}", chromium.display()));
    let started = Instant::now();
    while child.try_wait().expect("waiting for chromium").is_none() {
        if started.elapsed() > CHROMIUM_WAIT_MAX {
            let _ = child.kill();
            panic!("chromium {extra:?} took longer than {CHROMIUM_WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("chromium output");
    assert!(
        output.status.success(),
        "chromium {extra:?}: {}",
        output.status
    );
    String::from_utf8(output.stdout).expect("the DOM is UTF-8")
}

fn timeline() -> Timeline {
    let scenario = sim::scenario::load(&workspace().join(SCENARIO)).expect("scenario loads");
    sim::run(&scenario, &sim::RunOptions::default())
        .expect("scenario runs")
        .timeline
}

/// What the timeline itself says the page must show, counted without the renderer.
struct Expected {
    objects: Vec<String>,
    actions: BTreeMap<String, usize>,
    lines: usize,
    phases: usize,
}

fn expected(timeline: &Timeline) -> Expected {
    let mut objects: Vec<String> = Vec::new();
    let mut actions = BTreeMap::new();
    let mut reasons: BTreeMap<&str, &str> = BTreeMap::new();
    let mut phases = 0;
    for line in &timeline.lines {
        let object = if line.object.is_empty() {
            sim::html::RUN_LANE
        } else {
            &line.object
        };
        if !objects.iter().any(|o| o == object) {
            objects.push(object.to_string());
        }
        *actions.entry(line.action.clone()).or_default() += 1;
        if line.action == "SetCondition"
            && let Some(rest) = line.detail.split_once("Deleting=True (").map(|(_, r)| r)
        {
            let reason = rest.split(')').next().unwrap_or_default();
            if reasons.insert(&line.object, reason) != Some(reason) {
                phases += 1;
            }
        }
    }
    Expected {
        objects,
        actions,
        lines: timeline.lines.len(),
        phases,
    }
}

/// `name="value"` of every element whose tag starts with `open`, in document order.
fn attribute_values(dom: &str, open: &str, name: &str) -> Vec<String> {
    dom.split(open)
        .skip(1)
        .map(|element| {
            let tag = element.split('>').next().unwrap_or_default();
            let value = tag.split(&format!(" {name}=\"")).nth(1).unwrap_or_default();
            value.split('"').next().unwrap_or_default().to_string()
        })
        .collect()
}

fn body_count(dom: &str, name: &str) -> usize {
    attribute_values(dom, "<body", name)[0]
        .parse()
        .unwrap_or_else(|_| panic!("<body {name}> not set: the page's script did not run"))
}

#[test]
fn pdb_timeline_renders_a_lane_per_object_and_a_mark_per_action_in_chromium() {
    let started = Instant::now();
    let chromium = chromium();
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("pdb.html");
    let status = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .current_dir(workspace())
        .args(["sim", "run", SCENARIO, "--html"])
        .arg(&page)
        .stdout(Stdio::null())
        .status()
        .expect("lifecycle runs");
    assert!(status.success(), "sim run --html: {status}");

    let timeline = timeline();
    let written = std::fs::read_to_string(&page).expect("page written");
    assert!(
        written == sim::html::render(SCENARIO, &timeline),
        "the CLI's page is the renderer's, byte for byte, for the same (deterministic) run"
    );
    let want = expected(&timeline);
    assert_eq!(
        want.objects.len(),
        9,
        "the scenario's objects: {:?}",
        want.objects
    );
    assert_eq!(want.actions["Evict"], 3);
    assert_eq!(want.phases, 4);

    let profile = dir.path().join("profile");
    let dom = headless(&chromium, &profile, &page, &["--dump-dom".into()]);
    let lanes = attribute_values(&dom, "<g class=\"lane\"", "data-object");
    assert_eq!(lanes, want.objects, "lanes in the DOM");
    assert_eq!(body_count(&dom, "data-lanes"), want.objects.len());
    assert_eq!(body_count(&dom, "data-marks"), want.lines);
    assert_eq!(body_count(&dom, "data-bars"), want.phases);
    let marks = attribute_values(&dom, "<rect class=\"mark", "data-action");
    let mut by_action: BTreeMap<String, usize> = BTreeMap::new();
    for action in marks {
        *by_action.entry(action).or_default() += 1;
    }
    assert_eq!(by_action, want.actions, "marks per action in the DOM");
    let bars = attribute_values(&dom, "<rect class=\"bar\"", "data-phase");
    assert_eq!(
        bars,
        [
            "DrainingNode",
            "WaitingForInfrastructureDeletion",
            "WaitingForBootstrapDeletion",
            "DeletionCompleted"
        ]
    );

    let shot = dir.path().join("pdb.png");
    let (w, h) = WINDOW;
    headless(
        &chromium,
        &profile,
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={w},{h}"),
        ],
    );
    let image =
        png::decode(&std::fs::read(&shot).expect("screenshot written")).expect("PNG decodes");
    assert_eq!((image.width, image.height), WINDOW);
    let pixels_of = |hex: &str| {
        let rgb = [1, 3, 5].map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
        image.rgb.iter().filter(|p| **p == rgb).count()
    };
    let colour = |reason: &str| {
        sim::html::PHASE_COLOURS
            .iter()
            .find(|(r, _)| *r == reason)
            .unwrap()
            .1
    };
    for (what, hex, pixels_min) in [
        ("lane", sim::html::LANE_COLOURS[0], 5_000),
        ("lane", sim::html::LANE_COLOURS[1], 5_000),
        ("DrainingNode bar", colour("DrainingNode"), 2_000),
        (
            "WaitingForInfrastructureDeletion bar",
            colour("WaitingForInfrastructureDeletion"),
            1_000,
        ),
    ] {
        let n = pixels_of(hex);
        assert!(
            n >= pixels_min,
            "{what} {hex}: {n} pixels, want at least {pixels_min}"
        );
    }
    eprintln!(
        "chromium test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The PDB scenario under the faults seed 7 draws, plus a violation and lines whose object and
/// detail carry markup: faults and the violation are banded in the rendered page, and the
/// markup stays text (its script never runs).
#[test]
fn faults_and_violations_are_banded_and_markup_stays_text_in_chromium() {
    let chromium = chromium();
    let scenario = sim::scenario::load(&workspace().join(SCENARIO)).expect("scenario loads");
    let faults = sim::sweep::FaultChoice::parse("all").expect("fault choice");
    let faulted = sim::sweep::with_faults(&scenario, 7, &faults);
    let options = sim::RunOptions {
        seed: Some(7),
        ..Default::default()
    };
    let mut timeline = sim::run(&faulted, &options)
        .expect("scenario runs")
        .timeline;
    // No quotes inside: escaped quotes alone would break the script and hide a missing `<` escape.
    let payload = "<script>document.body.dataset.pwned=1</script><img src=x onerror=document.body.dataset.pwned=2>";
    for (actor, action) in [("scenario", "Patch"), ("invariant", "Violation")] {
        timeline.push(sim::timeline::Line {
            at_ms: timeline.lines.last().map_or(0, |l| l.at_ms + 1000),
            actor: actor.into(),
            action: action.into(),
            object: format!("Machine default/{payload}"),
            detail: format!("'\"&{payload}"),
            cause: None,
            command: None,
        });
    }
    let faults = timeline
        .lines
        .iter()
        .filter(|l| l.action == "Fault" && l.actor == "scenario")
        .count();
    assert!(faults >= 3, "seed 7 draws faults: {faults}");

    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("faults.html");
    std::fs::write(&page, sim::html::render(payload, &timeline)).expect("page written");
    let dom = headless(
        &chromium,
        &dir.path().join("profile"),
        &page,
        &["--dump-dom".into()],
    );
    assert_eq!(body_count(&dom, "data-marks"), timeline.lines.len());
    assert!(
        !dom.contains("data-pwned"),
        "markup in the timeline ran as script:\n{dom}"
    );
    let flagged = timeline
        .lines
        .iter()
        .filter(|l| sim::html::highlight(l) != sim::html::Highlight::Plain)
        .count();
    assert!(flagged > faults, "a fault's effects are flagged too");
    assert_eq!(dom.matches("<rect class=\"band\"").count(), flagged);
    assert_eq!(dom.matches("<rect class=\"mark violation\"").count(), 1);
    assert_eq!(
        dom.matches("<rect class=\"mark fault\"").count(),
        flagged - 1
    );
    assert_eq!(dom.matches("<text class=\"label bad\"").count(), 1);
}

#[test]
fn an_unwritable_html_path_fails_the_run_and_names_the_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_lifecycle"))
        .current_dir(workspace())
        .args([
            "sim",
            "run",
            SCENARIO,
            "--html",
            "/nonexistent-dir/pdb.html",
        ])
        .output()
        .expect("lifecycle runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--html /nonexistent-dir/pdb.html: "),
        "{stderr}"
    );
}

/// `lifecycle explain machine default/m1 --journal J --html OUT.html` on the PDB scenario's
/// journal: the DOM has the Machine's lane first, then a lane per object its commands touched,
/// one mark per story entry and one bar per phase of the story (read from `--format json`, not
/// from the page); the screenshot shows the DrainingNode bar.
#[test]
fn explain_html_shows_the_story_of_one_machine_in_chromium() {
    let chromium = chromium();
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal");
    let lifecycle = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lifecycle"));
        c.current_dir(workspace());
        c
    };
    let status = lifecycle()
        .args(["sim", "run", SCENARIO, "--journal"])
        .arg(&journal)
        .stdout(Stdio::null())
        .status()
        .expect("lifecycle runs");
    assert!(status.success(), "sim run --journal: {status}");
    let page = dir.path().join("m1.html");
    let explained = lifecycle()
        .args([
            "explain",
            "machine",
            "default/m1",
            "--format",
            "json",
            "--journal",
        ])
        .arg(&journal)
        .arg("--html")
        .arg(&page)
        .output()
        .expect("lifecycle explain runs");
    assert!(explained.status.success(), "{explained:?}");
    let story: serde_json::Value = serde_json::from_slice(&explained.stdout).expect("json story");
    let entries = story["entries"].as_array().expect("entries");
    let mut objects = vec!["Machine default/m1".to_string()];
    for e in entries {
        let text = e["text"].as_str().unwrap();
        if ["command", "refused"].contains(&e["what"].as_str().unwrap()) {
            let words: Vec<&str> = text.split_whitespace().collect();
            let object = format!("{} {}", words[1], words[2].trim_end_matches(':'));
            if !objects.contains(&object) {
                objects.push(object);
            }
        }
    }
    let reasons: Vec<&str> = story["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "DrainingNode",
            "WaitingForInfrastructureDeletion",
            "WaitingForBootstrapDeletion",
            "DeletionCompleted"
        ]
    );
    assert!(
        objects.len() >= 5,
        "the Node, both pods and the provider objects: {objects:?}"
    );

    let dom = headless(
        &chromium,
        &dir.path().join("profile"),
        &page,
        &["--dump-dom".into()],
    );
    let lanes = attribute_values(&dom, "<g class=\"lane\"", "data-object");
    assert_eq!(lanes, objects, "lanes in the DOM");
    assert_eq!(body_count(&dom, "data-marks"), entries.len());
    assert_eq!(
        attribute_values(&dom, "<rect class=\"bar\"", "data-phase"),
        reasons
    );
    // A mark tells its cause on hover.
    assert!(dom.contains("cause: #"), "no cause in the marks' titles");

    let shot = dir.path().join("m1.png");
    let (w, h) = WINDOW;
    headless(
        &chromium,
        &dir.path().join("profile"),
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={w},{h}"),
        ],
    );
    let image =
        png::decode(&std::fs::read(&shot).expect("screenshot written")).expect("PNG decodes");
    let draining = sim::html::PHASE_COLOURS
        .iter()
        .find(|(r, _)| *r == "DrainingNode")
        .unwrap()
        .1;
    let rgb = [1, 3, 5].map(|i| u8::from_str_radix(&draining[i..i + 2], 16).unwrap());
    let pixels = image.rgb.iter().filter(|p| **p == rgb).count();
    assert!(pixels >= 2_000, "DrainingNode bar: {pixels} pixels");
}
