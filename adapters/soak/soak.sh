#!/usr/bin/env bash
# The soak (not run in CI): `lifecycle run` against `lifecycle sim serve` of a churning world
# (world.py: Machines created and deleted, Nodes flapping, one Node malformed and updated
# every 5 s, an MHC remediating a worker every 10 min) for MINUTES of wall time at SPEED
# simulated seconds per second, both at the lowest CPU priority. Every INTERVAL seconds it
# appends the controller's RSS, open descriptors, threads, tokio tasks, journal size and the
# records the journal retains to OUT/samples.csv, and at the end prints the RSS slope after
# the warm-up (the first WARMUP minutes) by least squares, per wall hour and per simulated
# hour: memory, descriptors, tasks and the journal must stay flat for months.
#
#   cargo build --release -p adapters --bin lifecycle
#   adapters/soak/soak.sh [--minutes 30] [--speed 60] [--interval 30] [--warmup 5] [--out DIR]
#
# Needs python3 and curl. LIFECYCLE_BIN overrides the binary (target/release/lifecycle).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${LIFECYCLE_BIN:-$repo/target/release/lifecycle}
minutes=30 speed=60 interval=30 warmup=5 out=
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --speed) speed=$2; shift 2 ;;
        --interval) interval=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release -p adapters --bin lifecycle" >&2; exit 2; }
out=${out:-$(mktemp -d -t lifecycle-soak.XXXXXX)}
mkdir -p "$out"
echo "soak: $minutes min at ${speed}x, samples every ${interval}s in $out"

# The world outlasts the run by a tenth, so the controller never meets a world standing still.
hours=$(python3 -c "print($minutes * $speed * 1.1 / 60)")
python3 "$here/world.py" "$hours" > "$out/world.yaml"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
serve_pid= run_pid=
stop() {
    [ -n "$run_pid" ] && kill -TERM "$run_pid" 2>/dev/null && wait "$run_pid" 2>/dev/null
    [ -n "$serve_pid" ] && kill -INT "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    return 0
}
trap stop EXIT

nice -n 19 "$bin" sim serve "$out/world.yaml" --port "$port" --speed "$speed" \
    --kubeconfig-dir "$out/kube" > "$out/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 600); do
    grep -q '^playing ' "$out/serve.log" 2>/dev/null && break
    kill -0 "$serve_pid" 2>/dev/null || { cat "$out/serve.log" >&2; exit 3; }
    sleep 0.1
done
# `sim serve` prints the controller's clock flags after `--journal <DIR>`.
read -r -a clock < <(sed -n 's/.*--journal <DIR>//p' "$out/serve.log")

RUST_LOG=info NO_COLOR=1 nice -n 19 "$bin" run --kubeconfig "$out/kube/management.kubeconfig" \
    --journal "$out/journal" --metrics-addr "127.0.0.1:$metrics_port" "${clock[@]}" \
    > "$out/run.log" 2>&1 &
run_pid=$!

metric() { # the value of a series with no labels (or the given labels) on the page in $page
    awk -v name="$1" '$1 == name { print $2; found = 1; exit } END { if (!found) print "" }' <<< "$page"
}
echo "wall_s,simulated_h,rss_kib,open_fds,threads,tokio_tasks,journal_bytes,journal_records_retained,journal_records_appended,inputs_applied,unreadable_node_deliveries" \
    > "$out/samples.csv"
start=$(date +%s)
end=$((start + minutes * 60))
sleep 5
while :; do
    now=$(date +%s)
    kill -0 "$run_pid" 2>/dev/null || { echo "lifecycle run exited:" >&2; tail -20 "$out/run.log" >&2; exit 1; }
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$run_pid/status")
    threads=$(awk '/^Threads/ { print $2 }' "/proc/$run_pid/status")
    fds=$(ls "/proc/$run_pid/fd" | wc -l)
    journal_bytes=$( (du -sb "$out/journal" 2>/dev/null || true) | cut -f1)
    # `log stats` copies a journal in use, and the copy can miss what sled wrote meanwhile (it
    # then reports damage): once more, else the cell stays empty.
    retained=
    for _ in 1 2; do
        retained=$( (nice -n 19 "$bin" log stats --journal "$out/journal" 2>/dev/null || true) \
            | awk '/^records/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { print $i; exit } }')
        [ -n "$retained" ] && break
    done
    page=$(curl -sf "127.0.0.1:$metrics_port/metrics" || true)
    wall=$((now - start))
    simulated=$(python3 -c "print(round($wall * $speed / 3600, 2))")
    echo "$wall,$simulated,$rss,$fds,$threads,$(metric lifecycle_tokio_alive_tasks),$journal_bytes,$retained,$(metric lifecycle_journal_records_total),$(metric lifecycle_inputs_total),$(metric 'lifecycle_unreadable_objects_total{kind="Node"}')" \
        >> "$out/samples.csv"
    [ "$now" -ge "$end" ] && break
    sleep "$interval"
done

python3 - "$out/samples.csv" "$warmup" "$speed" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
warmup_s, speed = float(sys.argv[2]) * 60, float(sys.argv[3])
after = [r for r in rows if float(r["wall_s"]) >= warmup_s]
if len(after) < 3:
    sys.exit("too few samples after the warm-up for a slope")
xs = [float(r["wall_s"]) / 3600 for r in after]
ys = [float(r["rss_kib"]) / 1024 for r in after]
mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
print(f"RSS after {sys.argv[2]} min of warm-up: {min(ys):.1f}..{max(ys):.1f} MiB over {len(after)} samples; "
      f"slope {slope:+.3f} MiB per wall hour ({slope / speed * 1000:+.3f} KiB per simulated hour at {speed:g}x)")
EOF
echo "samples: $out/samples.csv"
