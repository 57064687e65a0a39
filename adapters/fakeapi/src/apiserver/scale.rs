//! The `scale` subresource of the CRDs that declare it (MachineSet, MachinePool): GET, PUT and
//! PATCH of an `autoscaling/v1` `Scale` whose `spec.replicas` is the object's
//! `specReplicasPath` and `status.replicas` its `statusReplicasPath`. A write changes only the
//! replicas (through the same path as a main-resource write, so it is validated and bumps
//! generation); the answer is the Scale of the object as stored after it.

use super::crds::ScalePaths;
use super::objects::{Answer, ObjectRef, Reply, Update, WriteOptions, write_desired};
use super::patch::apply_json_patch;
use super::state::SharedCluster;
use super::status::Failure;
use serde_json::{Value, json};
use sim::api::json as sjson;
use sim::api::managed::Subresource;

/// `.spec.replicas` as a JSON pointer.
fn pointer(path: &str) -> String {
    path.split('.')
        .filter(|s| !s.is_empty())
        .map(|s| format!("/{s}"))
        .collect()
}

fn scale_of(obj: &Value, paths: &ScalePaths) -> Value {
    let meta = &obj["metadata"];
    let mut scale = json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                     "resourceVersion": meta["resourceVersion"],
                     "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": obj.pointer(&pointer(&paths.spec_replicas)).cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer(&pointer(&paths.status_replicas)).cloned().unwrap_or(json!(0))},
    });
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|p| obj.pointer(&pointer(p)))
    {
        scale["status"]["selector"] = selector.clone();
    }
    scale
}

pub fn get(cluster: &SharedCluster, r: &ObjectRef, paths: &ScalePaths) -> Answer {
    cluster.read(|s| match s.store.get(&r.key()) {
        Some(o) => Ok((200, scale_of(o, paths)).into()),
        None => Err(Failure::not_found(r.t, &r.name)),
    })
}

fn invalid_replicas(name: &str, replicas: &Value) -> Failure {
    let message = format!(
        "Scale.autoscaling {name:?} is invalid: spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
    );
    Failure {
        details: Some(
            json!({"name": name, "group": "autoscaling", "kind": "Scale",
            "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                        "message": format!("Invalid value: {replicas}: must be greater than or equal to 0")}]}),
        ),
        ..Failure::new(422, "Invalid", message)
    }
}

/// PUT (`patch` = `None`, body is a Scale) or PATCH (`patch` = the media type) of `/scale`.
pub fn write(
    cluster: &SharedCluster,
    r: &ObjectRef,
    paths: &ScalePaths,
    body: &[u8],
    patch: Option<&str>,
    options: &WriteOptions,
) -> Answer {
    let sent: Value = serde_json::from_slice(body)
        .map_err(|e| Failure::bad_request(format!("invalid JSON body: {e}")))?;
    cluster.write_or_dry_run(options.dry_run, |store| {
        let current = store
            .get(&r.key())
            .cloned()
            .ok_or_else(|| Failure::not_found(r.t, &r.name))?;
        let before = scale_of(&current, paths);
        let wanted = match patch.map(|m| m.split(';').next().unwrap_or_default().trim()) {
            None => sent.clone(),
            Some("application/merge-patch+json" | "application/strategic-merge-patch+json") => {
                let mut s = before.clone();
                sjson::merge_patch(&mut s, &sent);
                s
            }
            Some("application/json-patch+json") => {
                let mut s = before.clone();
                apply_json_patch(&mut s, &sent).map_err(|m| Failure::invalid(r.t, &r.name, m))?;
                s
            }
            Some(other) => return Err(Failure::unsupported_media_type(other)),
        };
        if let Some(rv) = sjson::str_at(&wanted, "metadata.resourceVersion")
            && !rv.is_empty()
            && Some(rv) != sjson::str_at(&current, "metadata.resourceVersion")
        {
            return Err(Failure::conflict(r.t, &r.name));
        }
        let replicas = wanted
            .pointer("/spec/replicas")
            .cloned()
            .unwrap_or(json!(0));
        if !replicas
            .as_i64()
            .is_some_and(|n| (0..=i64::from(i32::MAX)).contains(&n))
        {
            return Err(invalid_replicas(&r.name, &replicas));
        }
        let mut desired = current.clone();
        let segments: Vec<String> = pointer(&paths.spec_replicas)
            .split('/')
            .skip(1)
            .map(str::to_string)
            .collect();
        let refs: Vec<&str> = segments.iter().map(String::as_str).collect();
        sjson::set_path(&mut desired, &refs, replicas);
        let reply = write_desired(
            store,
            r,
            &current,
            desired,
            Some(Subresource::Scale),
            Update::Patch,
            options,
        )?;
        Ok(Reply {
            body: scale_of(&reply.body, paths),
            ..reply
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reads_the_declared_paths() {
        let paths = ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        };
        let mp = json!({"metadata": {"name": "mp", "namespace": "default", "resourceVersion": "7"},
                        "spec": {"replicas": 3}, "status": {"replicas": 2}});
        let s = scale_of(&mp, &paths);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["status"]["replicas"], 2);
        assert_eq!(s["metadata"]["resourceVersion"], "7");
        assert_eq!(pointer(".spec.replicas"), "/spec/replicas");
    }
}
