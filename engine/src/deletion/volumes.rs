//! The volume-detach wait (upstream's `shouldWaitForNodeVolumes`): which volumes still hold
//! the Node, and the condition message that lists them.

use crate::drain::list_to_string;
use crate::model::{Kind, Node, Object, Scope};
use crate::store::Store;
use crate::time::Timestamp;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Entries shown per list in the message (`StringListToString`).
const VOLUME_NAMES_MAX: usize = 5;

/// What the Node is still waiting for; each list sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeWait {
    /// `ns/name` of claims whose volumes are attached (claims of skipped pods removed).
    pub persistent_volume_claims: Vec<String>,
    pub volumes_without_claim: Vec<String>,
    /// `status.volumesAttached` names that match no PersistentVolume.
    pub unmatched_attached: Vec<String>,
    /// VolumeAttachment volume names that match no PersistentVolume.
    pub unmatched_attachments: Vec<String>,
}

impl VolumeWait {
    pub fn is_empty(&self) -> bool {
        self.persistent_volume_claims.is_empty()
            && self.volumes_without_claim.is_empty()
            && self.unmatched_attached.is_empty()
            && self.unmatched_attachments.is_empty()
    }

    /// The `Deleting` message while waiting.
    pub fn message(&self, started: Timestamp) -> String {
        let mut msg = format!(
            "Waiting for Node volumes to be detached (started at {})",
            started.to_rfc3339()
        );
        let lines = [
            ("PersistentVolumeClaims", &self.persistent_volume_claims),
            (
                "PersistentVolumes without a .spec.claimRef to a PersistentVolumeClaim",
                &self.volumes_without_claim,
            ),
            (
                "Node with .status.volumesAttached entries not matching a PersistentVolume",
                &self.unmatched_attached,
            ),
            (
                "VolumeAttachment with .spec.source.persistentVolumeName not matching a PersistentVolume",
                &self.unmatched_attachments,
            ),
        ];
        for (title, list) in lines {
            if !list.is_empty() {
                let _ = write!(
                    msg,
                    "\n* {title}: {}",
                    list_to_string(list, VOLUME_NAMES_MAX)
                );
            }
        }
        msg
    }
}

/// Computes the wait for `node`. `ignored_claims` holds `ns/name` of claims used by pods the
/// drain would skip. Errors are upstream's (a VolumeAttachment without a PV name).
pub fn volumes_to_wait_for(
    store: &Store,
    scope: &Scope,
    node: &Node,
    ignored_claims: &BTreeSet<String>,
) -> Result<VolumeWait, String> {
    let attached: BTreeSet<&str> = node.volumes_attached.iter().map(String::as_str).collect();
    let mut attachments: BTreeSet<&str> = BTreeSet::new();
    for (_, object) in store.iter_kind(scope, &Kind::VolumeAttachment) {
        let Object::VolumeAttachment(va) = object else {
            continue;
        };
        if !va.attached || va.node_name != node.meta.name {
            continue;
        }
        match &va.persistent_volume_name {
            Some(pv) => {
                attachments.insert(pv);
            }
            None => {
                return Err(format!(
                    "failed to get PersistentVolume name from VolumeAttachment {}: \
                     .spec.source.persistentVolumeName is not set",
                    va.meta.name
                ));
            }
        }
    }
    if attached.is_empty() && attachments.is_empty() {
        return Ok(VolumeWait::default());
    }
    let mut matched_attached: BTreeSet<String> = BTreeSet::new();
    let mut matched_attachments: BTreeSet<&str> = BTreeSet::new();
    let mut claims: BTreeSet<String> = BTreeSet::new();
    let mut without_claim: BTreeSet<String> = BTreeSet::new();
    for (_, object) in store.iter_kind(scope, &Kind::PersistentVolume) {
        let Object::PersistentVolume(pv) = object else {
            continue;
        };
        let csi_name = pv
            .csi
            .as_ref()
            .map(|(driver, handle)| format!("kubernetes.io/csi/{driver}^{handle}"));
        let by_attached = csi_name.as_deref().is_some_and(|n| attached.contains(n));
        let by_attachment = attachments.contains(pv.meta.name.as_str());
        if !by_attached && !by_attachment {
            continue;
        }
        if let Some(n) = csi_name.filter(|_| by_attached) {
            matched_attached.insert(n);
        }
        if by_attachment {
            matched_attachments.insert(pv.meta.name.as_str());
        }
        match &pv.claim_ref {
            Some(c) if c.kind == "PersistentVolumeClaim" => {
                claims.insert(format!("{}/{}", c.namespace, c.name));
            }
            _ => {
                without_claim.insert(pv.meta.name.clone());
            }
        }
    }
    Ok(VolumeWait {
        persistent_volume_claims: claims
            .into_iter()
            .filter(|c| !ignored_claims.contains(c))
            .collect(),
        volumes_without_claim: without_claim.into_iter().collect(),
        unmatched_attached: attached
            .iter()
            .filter(|a| !matched_attached.contains(**a))
            .map(|a| a.to_string())
            .collect(),
        unmatched_attachments: attachments
            .iter()
            .filter(|a| !matched_attachments.contains(**a))
            .map(|a| a.to_string())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClaimRef, PersistentVolume, VolumeAttachment};
    use crate::testing::{meta, node, workload};

    fn pv(name: &str, csi: Option<(&str, &str)>, claim: Option<(&str, &str, &str)>) -> Object {
        Object::PersistentVolume(PersistentVolume {
            meta: meta("", name),
            csi: csi.map(|(d, h)| (d.to_string(), h.to_string())),
            claim_ref: claim.map(|(kind, ns, n)| ClaimRef {
                kind: kind.into(),
                namespace: ns.into(),
                name: n.into(),
            }),
        })
    }

    fn va(name: &str, node: &str, pv: Option<&str>, attached: bool) -> Object {
        Object::VolumeAttachment(VolumeAttachment {
            meta: meta("", name),
            node_name: node.into(),
            persistent_volume_name: pv.map(str::to_string),
            attached,
        })
    }

    fn store(objects: Vec<Object>) -> Store {
        let mut s = Store::default();
        for o in objects {
            s.upsert(&workload("c1"), o);
        }
        s
    }

    #[test]
    fn nothing_attached_means_done() {
        let s = store(vec![pv("pv1", Some(("d", "h1")), None)]);
        let w = volumes_to_wait_for(&s, &workload("c1"), &node("n1"), &BTreeSet::new()).unwrap();
        assert!(w.is_empty());
    }

    #[test]
    fn the_four_lists_and_ignored_claims() {
        let s = store(vec![
            pv(
                "pv1",
                Some(("csi.x", "h1")),
                Some(("PersistentVolumeClaim", "app", "data-1")),
            ),
            pv(
                "pv2",
                Some(("csi.x", "h2")),
                Some(("PersistentVolumeClaim", "app", "skipped")),
            ),
            pv("pv3", None, None),
            pv("pv4", None, Some(("Other", "app", "x"))),
            va("va1", "n1", Some("pv3"), true),
            va("va2", "n1", Some("pv-missing"), true),
            va("va3", "n1", Some("pv4"), true),
            va("va4", "n1", Some("pv-detached"), false),
            va("va5", "n2", Some("pv-other-node"), true),
        ]);
        let mut n = node("n1");
        n.volumes_attached = vec![
            "kubernetes.io/csi/csi.x^h1".into(),
            "kubernetes.io/csi/csi.x^h2".into(),
            "kubernetes.io/csi/csi.x^unknown".into(),
        ];
        let ignored: BTreeSet<String> = ["app/skipped".to_string()].into_iter().collect();
        let w = volumes_to_wait_for(&s, &workload("c1"), &n, &ignored).unwrap();
        assert_eq!(w.persistent_volume_claims, ["app/data-1"]);
        assert_eq!(w.volumes_without_claim, ["pv3", "pv4"]);
        assert_eq!(w.unmatched_attached, ["kubernetes.io/csi/csi.x^unknown"]);
        assert_eq!(w.unmatched_attachments, ["pv-missing"]);
        let started = Timestamp(1_704_067_200_000);
        assert_eq!(
            w.message(started),
            "Waiting for Node volumes to be detached (started at 2024-01-01T00:00:00Z)
* PersistentVolumeClaims: app/data-1
* PersistentVolumes without a .spec.claimRef to a PersistentVolumeClaim: pv3, pv4
* Node with .status.volumesAttached entries not matching a PersistentVolume: kubernetes.io/csi/csi.x^unknown
* VolumeAttachment with .spec.source.persistentVolumeName not matching a PersistentVolume: pv-missing"
        );
    }

    #[test]
    fn only_ignored_claims_left_means_done() {
        let s = store(vec![pv(
            "pv1",
            Some(("csi.x", "h1")),
            Some(("PersistentVolumeClaim", "kube-system", "ds-claim")),
        )]);
        let mut n = node("n1");
        n.volumes_attached = vec!["kubernetes.io/csi/csi.x^h1".into()];
        let ignored: BTreeSet<String> = ["kube-system/ds-claim".to_string()].into_iter().collect();
        assert!(
            volumes_to_wait_for(&s, &workload("c1"), &n, &ignored)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn lists_are_truncated_at_five() {
        let w = VolumeWait {
            volumes_without_claim: (1..=7).map(|i| format!("pv{i}")).collect(),
            ..Default::default()
        };
        assert!(w.message(Timestamp(0)).ends_with(
            "* PersistentVolumes without a .spec.claimRef to a PersistentVolumeClaim: \
             pv1, pv2, pv3, pv4, pv5, ... (2 more)"
        ));
    }

    #[test]
    fn attachment_without_volume_name_is_an_error() {
        let s = store(vec![va("va1", "n1", None, true)]);
        assert!(volumes_to_wait_for(&s, &workload("c1"), &node("n1"), &BTreeSet::new()).is_err());
    }
}
