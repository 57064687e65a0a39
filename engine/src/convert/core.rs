//! Kubernetes built-in kinds the controllers read (workload cluster objects mostly).

use super::ConvertError;
use super::common::{condition_status, label_selector, object_meta};
use super::field::At;
use crate::model::{
    ClaimRef, DaemonSet, Namespace, Node, NodeCondition, PersistentVolume, PersistentVolumeClaim,
    Pod, PodDisruptionBudget, Taint, VolumeAttachment,
};

pub(crate) fn node(root: &At) -> Result<Node, ConvertError> {
    let spec = root.get("spec").object()?;
    let status = root.get("status").object()?;
    let taints = spec
        .get("taints")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok(Taint {
                key: item.get("key").str_or_empty()?,
                value: item.get("value").str_or_empty()?,
                effect: item.get("effect").str_or_empty()?,
            })
        })
        .collect::<Result<_, ConvertError>>()?;
    let conditions = status
        .get("conditions")
        .items()?
        .iter()
        .map(|item| {
            let item = item.object()?;
            Ok(NodeCondition {
                type_: item.get("type").required_str()?,
                status: condition_status(&item.get("status"))?,
                reason: item.get("reason").str_or_empty()?,
                message: item.get("message").str_or_empty()?,
                last_transition_time: item.get("lastTransitionTime").opt_timestamp()?,
            })
        })
        .collect::<Result<_, ConvertError>>()?;
    let volumes_attached = status
        .get("volumesAttached")
        .items()?
        .iter()
        .map(|item| item.object()?.get("name").str_or_empty())
        .collect::<Result<_, _>>()?;
    Ok(Node {
        meta: object_meta(root)?,
        provider_id: spec.get("providerID").opt_str()?,
        unschedulable: spec.get("unschedulable").bool_or_false()?,
        taints,
        conditions,
        volumes_attached,
        kubelet_version: status.at("nodeInfo.kubeletVersion").opt_str()?,
    })
}

pub(crate) fn pod(root: &At) -> Result<Pod, ConvertError> {
    let spec = root.get("spec").object()?;
    let status = root.get("status").object()?;
    let mut has_empty_dir = false;
    let mut pvc_names = Vec::new();
    for volume in spec.get("volumes").items()? {
        let volume = volume.object()?;
        has_empty_dir |= volume.get("emptyDir").object()?.is_present();
        let claim = volume.get("persistentVolumeClaim").object()?;
        if let Some(name) = claim.get("claimName").opt_str()? {
            pvc_names.push(name);
        }
    }
    let mut ready = false;
    for condition in status.get("conditions").items()? {
        let condition = condition.object()?;
        if condition.get("type").opt_str()?.as_deref() == Some("Ready") {
            ready = condition.get("status").opt_str()?.as_deref() == Some("True");
        }
    }
    Ok(Pod {
        meta: object_meta(root)?,
        node_name: spec.get("nodeName").opt_str()?.filter(|n| !n.is_empty()),
        // The API server always reports a phase; a manifest without one is a pod not yet
        // started, which is what `Pending` means.
        phase: status
            .get("phase")
            .opt_str()?
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "Pending".to_string()),
        has_empty_dir,
        termination_grace_period_seconds: spec.get("terminationGracePeriodSeconds").opt_i64()?,
        pvc_names,
        ready,
    })
}

pub(crate) fn pod_disruption_budget(root: &At) -> Result<PodDisruptionBudget, ConvertError> {
    let spec = root.get("spec").object()?;
    Ok(PodDisruptionBudget {
        meta: object_meta(root)?,
        selector: label_selector(&spec.get("selector"))?,
        min_available: spec.get("minAvailable").opt_int_or_string()?,
        max_unavailable: spec.get("maxUnavailable").opt_int_or_string()?,
    })
}

pub(crate) fn daemon_set(root: &At) -> Result<DaemonSet, ConvertError> {
    Ok(DaemonSet {
        meta: object_meta(root)?,
    })
}

pub(crate) fn namespace(root: &At) -> Result<Namespace, ConvertError> {
    let meta = object_meta(root)?;
    let phase = root.get("status").object()?.get("phase").opt_str()?;
    Ok(Namespace {
        terminating: phase.as_deref() == Some("Terminating") || meta.is_deleting(),
        meta,
    })
}

pub(crate) fn persistent_volume(root: &At) -> Result<PersistentVolume, ConvertError> {
    let spec = root.get("spec").object()?;
    let csi = spec.get("csi").object()?;
    let claim = spec.get("claimRef").object()?;
    Ok(PersistentVolume {
        meta: object_meta(root)?,
        csi: if csi.is_present() {
            Some((
                csi.get("driver").str_or_empty()?,
                csi.get("volumeHandle").str_or_empty()?,
            ))
        } else {
            None
        },
        claim_ref: if claim.is_present() {
            Some(ClaimRef {
                kind: claim.get("kind").str_or_empty()?,
                namespace: claim.get("namespace").str_or_empty()?,
                name: claim.get("name").str_or_empty()?,
            })
        } else {
            None
        },
    })
}

pub(crate) fn persistent_volume_claim(root: &At) -> Result<PersistentVolumeClaim, ConvertError> {
    Ok(PersistentVolumeClaim {
        meta: object_meta(root)?,
    })
}

pub(crate) fn volume_attachment(root: &At) -> Result<VolumeAttachment, ConvertError> {
    let spec = root.get("spec").object()?;
    Ok(VolumeAttachment {
        meta: object_meta(root)?,
        node_name: spec.get("nodeName").str_or_empty()?,
        persistent_volume_name: spec
            .get("source")
            .object()?
            .get("persistentVolumeName")
            .opt_str()?,
        attached: root
            .get("status")
            .object()?
            .get("attached")
            .bool_or_false()?,
    })
}
