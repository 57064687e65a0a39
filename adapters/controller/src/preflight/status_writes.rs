//! The third sign that Cluster API's manager runs: a recent write of the Machine status only
//! its Machine controller writes (`status.phase`, the conditions, `status.deletion`), read from
//! the Machines' `metadata.managedFields`. Other writers of Machines (KCP, MachineSets, a
//! user's `kubectl label`: labels, annotations, spec) and this controller's own writes (field
//! manager [`FIELD_MANAGER`]) are no evidence.

use crate::kube::client::FIELD_MANAGER;
use engine::Timestamp;
use serde_json::Value;
use std::time::Duration;

/// The Machine status fields only CAPI's Machine controller writes, as FieldsV1 paths under
/// `f:status`: v1beta2's, and a v1beta1 entry's (`status.v1beta2.conditions`) or the
/// v1beta1 conditions v1beta2 keeps (`status.deprecated.v1beta1.conditions`).
const CAPI_STATUS_FIELDS: [&[&str]; 5] = [
    &["f:phase"],
    &["f:conditions"],
    &["f:deletion"],
    &["f:v1beta2", "f:conditions"],
    &["f:deprecated", "f:v1beta1", "f:conditions"],
];

/// One managedFields entry that wrote CAPI's Machine status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusWrite {
    /// `namespace/name`.
    pub machine: String,
    pub manager: String,
    /// As the entry says it (RFC 3339).
    pub time: String,
    /// How long ago; `None` when its time does not read (counted as recent: unknown is not
    /// old).
    pub ago: Option<Duration>,
    /// The fields it owns among [`CAPI_STATUS_FIELDS`], dotted (`status.phase`).
    pub fields: Vec<String>,
}

impl StatusWrite {
    pub fn recent(&self, within: Duration) -> bool {
        self.ago.is_none_or(|ago| ago <= within)
    }

    pub fn describe(&self) -> String {
        let ago = match self.ago {
            Some(ago) => format!("{}s ago", ago.as_secs()),
            None => "at a time that does not read".to_string(),
        };
        format!(
            "Machine {} had its status ({}) written {ago} ({}) by field manager {:?}",
            self.machine,
            self.fields.join(", "),
            self.time,
            self.manager
        )
    }
}

fn owned<'a>(fields: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(fields, |node, element| node.get(*element))
}

/// Every write of CAPI's Machine status by another manager than this controller, in `machine`.
pub fn writes_of(machine: &Value, now: Timestamp) -> Vec<StatusWrite> {
    let name = format!(
        "{}/{}",
        machine
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        machine
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    let entries = machine
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array);
    let mut out = Vec::new();
    for entry in entries.into_iter().flatten() {
        let manager = entry.get("manager").and_then(Value::as_str).unwrap_or("");
        if manager == FIELD_MANAGER {
            continue;
        }
        let Some(status) = entry.pointer("/fieldsV1/f:status") else {
            continue;
        };
        let fields: Vec<String> = CAPI_STATUS_FIELDS
            .iter()
            .filter(|path| owned(status, path).is_some())
            .map(|path| {
                let dotted: Vec<&str> = path.iter().map(|e| e.trim_start_matches("f:")).collect();
                format!("status.{}", dotted.join("."))
            })
            .collect();
        if fields.is_empty() {
            continue;
        }
        let time = entry
            .get("time")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ago = time.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| {
            Duration::from_millis(u64::try_from(now.as_millis() - t.as_millisecond()).unwrap_or(0))
        });
        out.push(StatusWrite {
            machine: name.clone(),
            manager: manager.to_string(),
            time: time.to_string(),
            ago,
            fields,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// 2026-01-01T00:10:00Z.
    const NOW: Timestamp = Timestamp(1_767_226_200_000);

    fn machine(entries: Value) -> Value {
        json!({"metadata": {"name": "w1", "namespace": "default", "managedFields": entries}})
    }

    fn entry(manager: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": "Update", "apiVersion": "cluster.x-k8s.io/v1beta2",
               "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields, "subresource": "status"})
    }

    fn recent(m: &Value) -> Vec<StatusWrite> {
        writes_of(m, NOW)
            .into_iter()
            .filter(|w| w.recent(Duration::from_secs(300)))
            .collect()
    }

    #[test]
    fn a_recent_write_of_capi_status_by_its_manager_is_evidence() {
        let m = machine(json!([entry(
            "manager",
            "2026-01-01T00:08:00Z",
            json!({"f:status": {"f:phase": {}, "f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}})
        )]));
        let found = recent(&m);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].ago, Some(Duration::from_secs(120)));
        assert_eq!(found[0].fields, ["status.phase", "status.conditions"]);
        assert_eq!(
            found[0].describe(),
            "Machine default/w1 had its status (status.phase, status.conditions) written 120s ago (2026-01-01T00:08:00Z) by field manager \"manager\""
        );
    }

    #[test]
    fn own_writes_labels_and_old_writes_are_no_evidence() {
        let own = entry(
            "lifecycle",
            "2026-01-01T00:09:00Z",
            json!({"f:status": {"f:phase": {}}}),
        );
        let label = entry(
            "kubectl-label",
            "2026-01-01T00:09:30Z",
            json!({"f:metadata": {"f:labels": {"f:x": {}}}}),
        );
        let kcp = entry(
            "manager",
            "2026-01-01T00:09:30Z",
            json!({"f:status": {"f:nodeRef": {}}, "f:spec": {"f:version": {}}}),
        );
        let old = entry(
            "manager",
            "2026-01-01T00:04:00Z",
            json!({"f:status": {"f:deletion": {}}}),
        );
        let m = machine(json!([own, label, kcp, old]));
        assert!(recent(&m).is_empty());
        // The old one is found, only not recent (six minutes).
        let all = writes_of(&m, NOW);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].ago, Some(Duration::from_secs(360)));
    }

    #[test]
    fn v1beta1_conditions_and_an_unreadable_time_count() {
        let nested = entry(
            "manager",
            "garbage",
            json!({"f:status": {"f:v1beta2": {"f:conditions": {}}}}),
        );
        let m = machine(json!([nested]));
        let found = recent(&m);
        assert_eq!(
            found.len(),
            1,
            "a time that does not read is not taken as old"
        );
        assert_eq!(found[0].fields, ["status.v1beta2.conditions"]);
        // Bad shapes are no evidence and no panic.
        assert!(writes_of(&json!({"metadata": {"managedFields": "x"}}), NOW).is_empty());
        assert!(writes_of(&json!(null), NOW).is_empty());
    }
}
