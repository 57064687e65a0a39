//! LIST: namespace, label and field selectors, `limit`/`continue` pagination and the
//! resourceVersion semantics of the Kubernetes API ("Semantics for get and list" in
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/>).
//!
//! The list's resourceVersion is the store's at the first page and stays in every later page's
//! token. Later pages read the current state after the last key returned (the store keeps no
//! history); a token whose resourceVersion the change log has dropped is 410 `Expired`.

use super::Query;
use super::resources::ResourceType;
use super::selector::FieldSelector;
use super::state::ClusterState;
use super::status::Failure;
use engine::model::LabelSelector;
use serde_json::{Value, json};
use sim::api::{ObjKey, json as sjson};

/// What to select: the namespace of the path and the two selectors.
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn from_query(
        t: &ResourceType,
        namespace: Option<String>,
        q: &Query,
    ) -> Result<Self, Failure> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
            .map_err(Failure::bad_request)?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), &t.kind)
            .map_err(Failure::bad_request)?;
        Ok(Filter {
            namespace,
            labels,
            fields,
        })
    }

    pub fn matches(&self, key: &ObjKey, object: &Value) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| key.namespace == *ns)
            && self.labels.matches(&sjson::labels(object))
            && self.fields.matches(object)
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The opaque `continue` token: list resourceVersion and the last key returned.
fn encode_continue(rv: u64, key: &ObjKey) -> String {
    hex(&format!("{rv}\n{}\n{}", key.namespace, key.name))
}

fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    let text = unhex(token)?;
    let mut parts = text.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, parts.next()?.to_string(), parts.next()?.to_string()))
}

/// Parses a resourceVersion parameter (400 when it is not a number).
pub fn parse_rv(s: &str) -> Result<u64, Failure> {
    s.parse()
        .map_err(|_| Failure::bad_request(format!("invalid resource version {s:?}")))
}

/// The list answer for `t` at `group_version` (`{Kind}List`).
pub fn list(
    state: &ClusterState,
    t: &ResourceType,
    group_version: &str,
    filter: &Filter,
    q: &Query,
) -> Result<Value, Failure> {
    let store = &state.store;
    let current = store.resource_version();
    let rv_param = q.get("resourceVersion").filter(|s| !s.is_empty());
    match (q.get("resourceVersionMatch"), rv_param) {
        (Some(_), None) => {
            return Err(Failure::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        (Some("Exact"), Some(rv)) => {
            let rv = parse_rv(rv)?;
            if rv < current {
                return Err(Failure::expired(format!(
                    "too old resource version: {rv} ({current})"
                )));
            }
            if rv > current {
                return Err(Failure::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {rv}, current: {current}"),
                ));
            }
        }
        (Some("NotOlderThan") | None, Some(rv)) => {
            if parse_rv(rv)? > current {
                return Err(Failure::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {rv}, current: {current}"),
                ));
            }
        }
        (None, None) => {}
        (Some(other), Some(_)) => {
            return Err(Failure::bad_request(format!(
                "unsupported resourceVersionMatch {other:?}"
            )));
        }
    }
    let limit: usize = match q.get("limit") {
        Some(s) => s
            .parse()
            .map_err(|_| Failure::bad_request(format!("invalid limit {s:?}")))?,
        None => 0,
    };
    let (list_rv, after) = match q.get("continue").filter(|s| !s.is_empty()) {
        None => (current, None),
        Some(token) => {
            let (rv, ns, name) = decode_continue(token)
                .ok_or_else(|| Failure::bad_request("invalid continue token"))?;
            if store.changes_since(rv).is_err() {
                return Err(Failure::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            (rv, Some((ns, name)))
        }
    };
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    let candidates = store
        .list(&t.group, &t.kind)
        .filter(|(k, _)| {
            after.as_ref().is_none_or(|(ns, name)| {
                (k.namespace.as_str(), k.name.as_str()) > (ns.as_str(), name.as_str())
            })
        })
        .filter(|(k, o)| filter.matches(k, o));
    for (key, object) in candidates {
        if limit > 0 && items.len() == limit {
            remaining += 1;
            continue;
        }
        items.push(object.clone());
        if limit > 0 && items.len() == limit {
            next = Some(encode_continue(list_rv, key));
        }
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0 {
        metadata["continue"] = json!(next.unwrap_or_default());
        metadata["remainingItemCount"] = json!(remaining);
    }
    Ok(json!({
        "apiVersion": group_version,
        "kind": format!("{}List", t.kind),
        "metadata": metadata,
        "items": items,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let key = ObjKey::new("", "Pod", "app", "web-0");
        let token = encode_continue(42, &key);
        assert_eq!(
            decode_continue(&token),
            Some((42, "app".into(), "web-0".into()))
        );
        assert_eq!(decode_continue("zz"), None);
    }
}
