//! Follows the release Cluster API's manager runs while `lifecycle run` runs beside it: CAPI is
//! upgraded under a running controller. Its Deployment is read every [`EVERY`] (as the
//! preflight reads it, `--capi-version` standing in when it cannot be), and each change of
//! judgement is fed to the loop as `Input::CapiRelease`, journaled like any input, served as
//! `lifecycle_capi_release` and logged. A read that may pass on its own (no connection, a 5xx)
//! keeps the last judgement.

use super::{Release, read_manager, read_release};
use crate::kube::Metrics;
use crate::kube::channel::{Event, Queued};
use engine::ownership::{CapiRelease, ReleaseSupport};
use kube::Client;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often CAPI's manager Deployment is read (on the controller's clock).
pub const EVERY: Duration = Duration::from_secs(30);

/// The judgement of what was read; `None` when the read may pass on its own (keep the last).
pub fn judge(found: &Result<(Release, String), (String, bool)>) -> Option<CapiRelease> {
    Some(match found {
        Ok((release, _)) => release.judged(),
        Err((_, true)) => return None,
        Err((why, false)) => CapiRelease {
            release: format!("unknown ({why})"),
            support: ReleaseSupport::Unknown,
        },
    })
}

/// Reads and judges until the loop stops taking inputs; `last` is what the engine judged last
/// (its restored state): only news to it is fed ([`CapiRelease::is_news`]).
pub async fn follow(
    client: Client,
    namespace: String,
    given: Option<Release>,
    mut last: CapiRelease,
    tx: mpsc::Sender<Queued>,
    metrics: Arc<Metrics>,
) {
    let mut logged: Option<CapiRelease> = None;
    loop {
        let manager = read_manager(&client, &namespace).await;
        let found = read_release(&namespace, given.as_ref(), &manager);
        match judge(&found) {
            Some(now) if logged.as_ref() != Some(&now) => {
                let source = found.as_ref().map_or("", |(_, source)| source.as_str());
                match now.support {
                    ReleaseSupport::Supported => {
                        tracing::info!(release = %now.release, %source, "Cluster API's manager runs a supported release")
                    }
                    ReleaseSupport::Unknown => {
                        tracing::warn!(release = %now.release, %source, "Cluster API's manager runs a release this build does not know: deletions go on as before; check the supported releases (README) and upgrade this controller, or hand its Machines back with `lifecycle release --all`")
                    }
                    ReleaseSupport::Unsupported => {
                        tracing::warn!(release = %now.release, %source, "Cluster API's manager runs a release this build does not support: a takeover finishes the deletions it holds and hands every other Machine back")
                    }
                }
                metrics.set_capi_release(&now.release, now.support.as_str());
                if last.is_news(&now) {
                    let input = Event::Input(engine::Input::CapiRelease(now.clone()));
                    if tx.send(input.into()).await.is_err() {
                        return;
                    }
                    last = now.clone();
                }
                logged = Some(now);
            }
            Some(_) => {}
            None => {
                if let Err((why, _)) = &found {
                    tracing::warn!(
                        "cannot read Cluster API's release now, keeping the last: {why}"
                    );
                }
            }
        }
        tokio::time::sleep(crate::clock::real_duration(EVERY)).await;
    }
}
