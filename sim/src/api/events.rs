//! The Events each simulated cluster's API keeps (core/v1), apart from its objects, written as
//! the adapter writes them over HTTP: the first emission of a series is created (409 when its
//! name is taken), a repeat updates its series' Event (`count`, `message`, `lastTimestamp`),
//! or creates it anew when it is gone. Apart, so that they take no uid or resourceVersion from
//! the objects (timelines show both): nothing but the controller writes or reads them.

use super::{ApiError, json};
use engine::model::Scope;
use engine::time::Timestamp;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// An Event's place: its cluster, namespace and name.
pub type EventPlace = (Scope, String, String);

#[derive(Clone, Debug, Default)]
pub struct EventLog {
    events: BTreeMap<EventPlace, Value>,
}

impl EventLog {
    /// Records an Event body the controller sends to `scope` at `now`.
    pub fn record(
        &mut self,
        scope: &Scope,
        mut body: Value,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        let place = (
            scope.clone(),
            json::namespace(&body).to_string(),
            json::name(&body).to_string(),
        );
        if place.2.is_empty() {
            return Err(ApiError::Invalid("metadata.name: Required value".into()));
        }
        let at = json!(now.to_rfc3339());
        let repeat = body["count"].as_u64().is_some_and(|c| c > 1);
        match self.events.get_mut(&place) {
            Some(event) if repeat => {
                event["count"] = body["count"].clone();
                event["message"] = body["message"].clone();
                event["lastTimestamp"] = at;
                Ok(())
            }
            Some(_) => Err(ApiError::AlreadyExists(format!(
                "event {:?} already exists",
                place.2
            ))),
            None => {
                body["firstTimestamp"] = at.clone();
                body["lastTimestamp"] = at;
                self.events.insert(place, body);
                Ok(())
            }
        }
    }

    pub fn get(&self, scope: &Scope, namespace: &str, name: &str) -> Option<&Value> {
        self.events
            .get(&(scope.clone(), namespace.to_string(), name.to_string()))
    }

    /// Every Event kept, by place.
    pub fn iter(&self) -> impl Iterator<Item = (&EventPlace, &Value)> {
        self.events.iter()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, count: u64, message: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "reason": "R", "message": message, "count": count})
    }

    #[test]
    fn a_series_is_one_event_whose_repeats_update_it() {
        let mut log = EventLog::default();
        let s = Scope::Management;
        let t = Timestamp(1_000);
        log.record(&s, event("m1.a", 1, "first"), t).unwrap();
        assert!(matches!(
            log.record(&s, event("m1.a", 1, "again"), t),
            Err(ApiError::AlreadyExists(_))
        ));
        log.record(&s, event("m1.a", 3, "third"), Timestamp(61_000))
            .unwrap();
        let e = log.get(&s, "default", "m1.a").unwrap();
        assert_eq!(
            (e["count"].as_u64(), e["message"].as_str()),
            (Some(3), Some("third"))
        );
        assert_eq!(e["firstTimestamp"], "1970-01-01T00:00:01Z");
        // A repeat whose Event is gone creates it anew.
        log.record(&s, event("m1.b", 2, "second"), t).unwrap();
        assert_eq!(log.len(), 2);
    }
}
