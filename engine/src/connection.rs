//! Why a workload cluster cannot be reached: what its connector found wrong with the
//! `<cluster>-kubeconfig` Secret (key `value`) it connects through.
//!
//! Unreachable is unknown, not absent: a cluster that cannot be reached holds back what depends
//! on its cache (a Machine's drain and Node deletion, an MHC's verdicts, a MachinePool's
//! nodeRefs), as an unsynced cache does. What this adds is saying why, where an operator looks:
//! the drivers report a connector's failure as [`crate::intake::Arrival::ConnectFailed`], the
//! intake turns each change of reason into [`crate::Input::ClusterUnreachable`] (journaled
//! like every input), and the controllers that wait on the cluster put [`Unreachable::message`]
//! in the condition they write and one Warning event ([`EVENT_REASON`]) per change.

use crate::model::ClusterName;
use serde::{Deserialize, Serialize};

/// The reason of the Warning event, and of the `Deleting` condition, that say so.
pub const EVENT_REASON: &str = "WorkloadClusterUnreachable";
/// The condition an MHC or a MachinePool carries (False) while its workload cluster cannot be
/// reached; removed once it can. A product condition, like `ObjectsReadable`.
pub const REACHABLE_CONDITION: &str = "WorkloadClusterReachable";
/// The longest error text kept from a connector (a kube error can quote a whole kubeconfig):
/// it is journaled, kept in the engine's state and written into conditions.
pub const ERROR_CHARS_MAX: usize = 256;

/// What the connector of a workload cluster found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Unreachable {
    /// The kubeconfig Secret does not exist (the API answered 404).
    SecretMissing,
    /// The Secret could not be read (403, a 5xx, a timeout): what the API said.
    SecretUnreadable { error: String },
    /// The Secret has no key `value`.
    NoValue,
    /// The key `value` is not a kubeconfig (not UTF-8, not a kubeconfig's YAML).
    Unparsable { error: String },
    /// The kubeconfig parses, but no client can be built from it (no current context, a
    /// certificate that does not load, an auth plugin that fails).
    ClientFailed { error: String },
}

/// `<namespace>/<cluster>-kubeconfig`: where CAPI keeps a workload cluster's kubeconfig.
pub fn kubeconfig_secret(cluster: &ClusterName) -> String {
    format!("{}/{}-kubeconfig", cluster.namespace, cluster.name)
}

impl Unreachable {
    /// A short, stable name of the kind of reason (`SecretMissing`): once-keys, tests.
    pub fn code(&self) -> &'static str {
        match self {
            Unreachable::SecretMissing => "SecretMissing",
            Unreachable::SecretUnreadable { .. } => "SecretUnreadable",
            Unreachable::NoValue => "NoValue",
            Unreachable::Unparsable { .. } => "Unparsable",
            Unreachable::ClientFailed { .. } => "ClientFailed",
        }
    }

    /// The same reason with its error text cut to [`ERROR_CHARS_MAX`] characters.
    pub fn bounded(self) -> Unreachable {
        let cut = |error: String| match error.char_indices().nth(ERROR_CHARS_MAX) {
            Some((at, _)) => format!("{}...", &error[..at]),
            None => error,
        };
        match self {
            Unreachable::SecretUnreadable { error } => {
                Unreachable::SecretUnreadable { error: cut(error) }
            }
            Unreachable::Unparsable { error } => Unreachable::Unparsable { error: cut(error) },
            Unreachable::ClientFailed { error } => Unreachable::ClientFailed { error: cut(error) },
            other => other,
        }
    }

    /// What is wrong, about `cluster`: `its kubeconfig Secret default/c1-kubeconfig is
    /// missing`.
    pub fn detail(&self, cluster: &ClusterName) -> String {
        let secret = kubeconfig_secret(cluster);
        match self {
            Unreachable::SecretMissing => format!("its kubeconfig Secret {secret} is missing"),
            Unreachable::SecretUnreadable { error } => {
                format!("its kubeconfig Secret {secret} cannot be read: {error}")
            }
            Unreachable::NoValue => {
                format!("its kubeconfig Secret {secret} has no key \"value\"")
            }
            Unreachable::Unparsable { error } => format!(
                "the key \"value\" of its kubeconfig Secret {secret} is not a kubeconfig: {error}"
            ),
            Unreachable::ClientFailed { error } => {
                format!("no client can be built from its kubeconfig (Secret {secret}): {error}")
            }
        }
    }

    /// The sentence conditions, events and timelines carry: `cannot reach workload cluster
    /// default/c1: its kubeconfig Secret default/c1-kubeconfig is missing`.
    pub fn message(&self, cluster: &ClusterName) -> String {
        format!(
            "cannot reach workload cluster {}/{}: {}",
            cluster.namespace,
            cluster.name,
            self.detail(cluster)
        )
    }

    /// What an operator does about it: what to create or fix.
    pub fn to_unblock(&self, cluster: &ClusterName) -> String {
        let secret = kubeconfig_secret(cluster);
        let what = match self {
            Unreachable::SecretMissing => format!(
                "create Secret {secret} (type cluster.x-k8s.io/secret) with the workload cluster's kubeconfig under key \"value\" (the control plane provider writes it: check that it runs)"
            ),
            Unreachable::SecretUnreadable { error } => format!(
                "let the controller read Secret {secret} (RBAC: get and list secrets in namespace {}), or fix what the API answered: {error}",
                cluster.namespace
            ),
            Unreachable::NoValue => format!(
                "put the workload cluster's kubeconfig under key \"value\" of Secret {secret}"
            ),
            Unreachable::Unparsable { error } => format!(
                "replace the key \"value\" of Secret {secret} with a valid kubeconfig ({error})"
            ),
            Unreachable::ClientFailed { error } => format!(
                "fix the kubeconfig in Secret {secret} so that a client can be built from it ({error})"
            ),
        };
        format!("{what}; the controller retries on its own and goes on once it connects")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c1() -> ClusterName {
        ClusterName::new("default", "c1")
    }

    #[test]
    fn each_reason_names_the_secret_and_what_is_wrong_with_it() {
        let error = || "boom".to_string();
        let cases = [
            (
                Unreachable::SecretMissing,
                "its kubeconfig Secret default/c1-kubeconfig is missing",
            ),
            (
                Unreachable::SecretUnreadable { error: error() },
                "its kubeconfig Secret default/c1-kubeconfig cannot be read: boom",
            ),
            (
                Unreachable::NoValue,
                "its kubeconfig Secret default/c1-kubeconfig has no key \"value\"",
            ),
            (
                Unreachable::Unparsable { error: error() },
                "the key \"value\" of its kubeconfig Secret default/c1-kubeconfig is not a kubeconfig: boom",
            ),
            (
                Unreachable::ClientFailed { error: error() },
                "no client can be built from its kubeconfig (Secret default/c1-kubeconfig): boom",
            ),
        ];
        for (reason, detail) in cases {
            assert_eq!(reason.detail(&c1()), detail);
            assert_eq!(
                reason.message(&c1()),
                format!("cannot reach workload cluster default/c1: {detail}")
            );
            assert!(reason.to_unblock(&c1()).contains("default/c1-kubeconfig"));
        }
        assert!(
            Unreachable::SecretMissing
                .to_unblock(&c1())
                .starts_with("create Secret default/c1-kubeconfig")
        );
    }

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let long = "é".repeat(ERROR_CHARS_MAX + 10);
        let Unreachable::Unparsable { error } = Unreachable::Unparsable { error: long }.bounded()
        else {
            panic!("same variant");
        };
        assert_eq!(error.chars().count(), ERROR_CHARS_MAX + 3);
        assert!(error.ends_with("..."));
        let short = Unreachable::ClientFailed { error: "x".into() };
        assert_eq!(short.clone().bounded(), short);
    }
}
