//! Plays a [`Live`] world over the served clusters in (scaled) real time: every few
//! milliseconds, or when the world's next event is due, it locks every cluster (in one fixed
//! order), lets the world step to the clock's now, and unlocks, which wakes the watches.

use crate::apiserver::SharedCluster;
use crate::clock;
use engine::model::Scope;
use sim::api::ClusterStore;
use sim::live::Live;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How often the world looks at what the controller wrote, in real time.
pub const POLL: Duration = Duration::from_millis(20);

/// A world being played. [`Player::finished`] waits for the scenario's end.
pub struct Player {
    stop: watch::Sender<bool>,
    task: JoinHandle<Live>,
    /// Each time the scenario asks for the controller process to be killed and restarted.
    pub restarts: mpsc::UnboundedReceiver<u32>,
}

impl Player {
    /// Starts playing `live` on `clusters` (every served cluster, by scope).
    pub fn start(live: Live, clusters: BTreeMap<Scope, SharedCluster>) -> Player {
        let (stop, stopped) = watch::channel(false);
        let (tx, restarts) = mpsc::unbounded_channel();
        let task = tokio::spawn(play(live, clusters, stopped, tx));
        Player {
            stop,
            task,
            restarts,
        }
    }

    /// Whether the scenario's end has been played.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the scenario's end; returns the world to be judged.
    pub async fn finished(self) -> Result<Live, String> {
        self.task
            .await
            .map_err(|e| format!("the world's player failed: {e}"))
    }

    /// Stops playing now (Ctrl-C of `sim serve`).
    pub async fn stop(self) -> Result<Live, String> {
        let _ = self.stop.send(true);
        self.finished().await
    }
}

async fn play(
    mut live: Live,
    clusters: BTreeMap<Scope, SharedCluster>,
    mut stopped: watch::Receiver<bool>,
    restarts: mpsc::UnboundedSender<u32>,
) -> Live {
    loop {
        let now = clock::wall_now();
        let requests = step(&mut live, &clusters, now);
        if requests.restarts > 0 {
            let _ = restarts.send(requests.restarts);
        }
        if now >= live.end() {
            return live;
        }
        let next = live
            .next_event_at()
            .map_or(live.end(), |t| t.min(live.end()));
        let wait = clock::until(next).min(POLL);
        tokio::select! {
            _ = stopped.changed() => return live,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn step(
    live: &mut Live,
    clusters: &BTreeMap<Scope, SharedCluster>,
    now: engine::Timestamp,
) -> sim::live::Requests {
    let mut locks: Vec<(Scope, crate::apiserver::StoreLock<'_>)> = clusters
        .iter()
        .map(|(scope, cluster)| (scope.clone(), cluster.lock_store()))
        .collect();
    let mut stores: BTreeMap<Scope, &mut ClusterStore> = locks
        .iter_mut()
        .map(|(scope, lock)| (scope.clone(), &mut **lock))
        .collect();
    live.step(now, &mut stores)
}
