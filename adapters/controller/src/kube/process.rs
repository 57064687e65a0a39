//! The `process_*` series Prometheus clients export, read from `/proc/self` (Linux).

use prometheus_client::metrics::MetricType;
use std::sync::OnceLock;

/// Clock ticks per second of `/proc/*/stat` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_SIZE: f64 = 4096.0;

fn start_time() -> f64 {
    static START: OnceLock<f64> = OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

/// `(utime + stime) seconds, virtual bytes, resident bytes)` from `/proc/self/stat`.
fn stat() -> Option<(f64, f64, f64)> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // `rest` starts at field 3 (state): utime is field 14, stime 15, vsize 23, rss 24.
    let cpu = (num(11)? + num(12)?) / TICKS_PER_SECOND;
    Some((cpu, num(20)?, num(21)? * PAGE_SIZE))
}

fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

/// The families (absent where `/proc` is not there).
pub fn families() -> Vec<super::metrics::ScrapedFamily> {
    let mut out = vec![(
        "process_start_time_seconds",
        MetricType::Gauge,
        "Start time of the process since the Unix epoch, in seconds.",
        vec![(Vec::new(), start_time())],
    )];
    if let Some((cpu, virtual_bytes, resident)) = stat() {
        out.push((
            "process_cpu_seconds",
            MetricType::Counter,
            "Total user and system CPU time spent, in seconds.",
            vec![(Vec::new(), cpu)],
        ));
        out.push((
            "process_virtual_memory_bytes",
            MetricType::Gauge,
            "Virtual memory size, in bytes.",
            vec![(Vec::new(), virtual_bytes)],
        ));
        out.push((
            "process_resident_memory_bytes",
            MetricType::Gauge,
            "Resident memory size, in bytes.",
            vec![(Vec::new(), resident)],
        ));
    }
    if let Some(fds) = open_fds() {
        out.push((
            "process_open_fds",
            MetricType::Gauge,
            "Open file descriptors.",
            vec![(Vec::new(), fds)],
        ));
    }
    // Scraped from a task of the runtime it counts.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        out.push((
            "lifecycle_tokio_alive_tasks",
            MetricType::Gauge,
            "Tasks alive in the process's tokio runtime (watches, connectors, commands in flight, servers).",
            vec![(Vec::new(), runtime.metrics().num_alive_tasks() as f64)],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    /// A task spawned and not finished is counted; outside a runtime there is no series.
    #[tokio::test]
    async fn the_runtime_reports_its_alive_tasks() {
        let tasks = || {
            super::families()
                .into_iter()
                .find(|f| f.0 == "lifecycle_tokio_alive_tasks")
                .map(|f| f.3[0].1)
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move { drop(rx.await) });
        assert!(tasks().is_some_and(|n| n >= 1.0), "{:?}", tasks());
        drop(tx);
        task.await.unwrap();
        assert!(std::thread::spawn(tasks).join().unwrap().is_none());
    }

    #[test]
    fn this_process_reports_cpu_memory_and_descriptors() {
        super::start_time();
        let (cpu, virtual_bytes, resident) = super::stat().expect("/proc/self/stat reads");
        assert!(cpu >= 0.0);
        assert!(
            resident > 1_000_000.0 && virtual_bytes >= resident,
            "{resident} {virtual_bytes}"
        );
        assert!(super::open_fds().unwrap() >= 3.0);
    }
}
