//! TokenReview and SubjectAccessReview, with a fixed notion of who is who, so that what
//! delegates authentication and authorization to the API server (the controller's secure
//! `/metrics`, `lifecycle preflight`) can be tested against it. Requests themselves are not
//! authenticated. Reviews are answered by the RBAC objects stored in the cluster
//! ([`super::rbac`]).
//!
//! | token | user | may |
//! |---|---|---|
//! | [`ADMIN_TOKEN`] (in every kubeconfig the server writes) | [`ADMIN_USER`], group `system:masters` | everything |
//! | [`UNPRIVILEGED_TOKEN`] | [`UNPRIVILEGED_USER`], group `system:authenticated` | what stored RBAC grants it |
//! | any other | not authenticated | |

use super::rbac::{self, Attributes, Subject};
use super::status::Failure;
use serde_json::{Value, json};
use sim::api::ClusterStore;

pub const ADMIN_TOKEN: &str = "lifecycle-sim-admin-token";
pub const ADMIN_USER: &str = "lifecycle-sim-admin";
pub const UNPRIVILEGED_TOKEN: &str = "lifecycle-sim-unprivileged-token";
pub const UNPRIVILEGED_USER: &str = "system:serviceaccount:default:unprivileged";

pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";

/// Who a token is: (user name, groups).
fn identity(token: &str) -> Option<(&'static str, [&'static str; 2])> {
    match token {
        ADMIN_TOKEN => Some((ADMIN_USER, ["system:masters", "system:authenticated"])),
        UNPRIVILEGED_TOKEN => Some((UNPRIVILEGED_USER, ["system:authenticated", ""])),
        _ => None,
    }
}

fn review_body(body: &[u8], kind: &str, group: &str) -> Result<Value, Failure> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| Failure::bad_request(format!("the {kind} is not JSON: {e}")))?;
    let version = format!("{group}/v1");
    if review["apiVersion"] != version.as_str() || review["kind"] != kind {
        return Err(Failure::bad_request(format!(
            "expected a {kind} of {version}, got {} {}",
            review["kind"], review["apiVersion"]
        )));
    }
    Ok(review)
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`: the review with its `status`.
pub fn token_review(body: &[u8]) -> Result<Value, Failure> {
    let mut review = review_body(body, "TokenReview", AUTHENTICATION_GROUP)?;
    let token = review.pointer("/spec/token").and_then(Value::as_str);
    let audiences = review
        .pointer("/spec/audiences")
        .cloned()
        .unwrap_or(json!([]));
    review["status"] = match token.and_then(identity) {
        Some((user, groups)) => json!({
            "authenticated": true,
            "user": {
                "username": user,
                "uid": format!("uid-{user}"),
                "groups": groups.iter().filter(|g| !g.is_empty()).collect::<Vec<_>>(),
            },
            "audiences": audiences,
        }),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(review)
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: `spec.user` and `spec.groups`
/// as the RBAC objects in `store` allow them ([`super::rbac`]; `system:masters` is allowed
/// everything).
pub fn subject_access_review(body: &[u8], store: &ClusterStore) -> Result<Value, Failure> {
    let mut review = review_body(body, "SubjectAccessReview", AUTHORIZATION_GROUP)?;
    let spec = &review["spec"];
    let attributes = Attributes::of(spec).ok_or_else(|| {
        Failure::bad_request("spec.resourceAttributes or spec.nonResourceAttributes is required")
    })?;
    let who = Subject {
        user: spec["user"].as_str().unwrap_or_default().to_string(),
        groups: spec["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    };
    if who.user.is_empty() && who.groups.is_empty() {
        return Err(Failure::bad_request(
            "spec.user or spec.groups: at least one of user or group must be specified",
        ));
    }
    review["status"] = status(&rbac::authorize(store, &who, &attributes));
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(review)
}

fn status(decision: &rbac::Decision) -> Value {
    if decision.allowed {
        json!({"allowed": true, "reason": decision.reason})
    } else {
        json!({"allowed": false})
    }
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (`kubectl auth can-i`): the
/// asker is who its bearer `token` says (`system:anonymous` for a token the table does not
/// know), allowed as [`subject_access_review`] would allow them.
pub fn self_subject_access_review(
    body: &[u8],
    token: &str,
    store: &ClusterStore,
) -> Result<Value, Failure> {
    let mut review = review_body(body, "SelfSubjectAccessReview", AUTHORIZATION_GROUP)?;
    let attributes = Attributes::of(&review["spec"]).ok_or_else(|| {
        Failure::bad_request("spec.resourceAttributes or spec.nonResourceAttributes is required")
    })?;
    let who = match identity(token) {
        Some((user, groups)) => Subject {
            user: user.to_string(),
            groups: groups
                .iter()
                .filter(|g| !g.is_empty())
                .map(|g| g.to_string())
                .collect(),
        },
        None => Subject {
            user: "system:anonymous".to_string(),
            groups: vec!["system:unauthenticated".to_string()],
        },
    };
    review["status"] = status(&rbac::authorize(store, &who, &attributes));
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(review)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(t: &str) -> Value {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "spec": {"token": t}});
        token_review(body.to_string().as_bytes()).unwrap()["status"].clone()
    }

    fn access(groups: Value) -> bool {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                          "spec": {"user": "u", "groups": groups,
                                   "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
        subject_access_review(body.to_string().as_bytes(), &ClusterStore::default()).unwrap()["status"]["allowed"]
            .as_bool()
            .unwrap()
    }

    #[test]
    fn a_self_review_answers_for_the_bearer() {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                          "spec": {"resourceAttributes": {"group": "cluster.x-k8s.io",
                                   "resource": "machines", "verb": "patch"}}});
        let allowed = |token: &str| {
            self_subject_access_review(body.to_string().as_bytes(), token, &ClusterStore::default())
                .unwrap()["status"]["allowed"]
                .as_bool()
                .unwrap()
        };
        assert!(allowed(ADMIN_TOKEN));
        assert!(!allowed(UNPRIVILEGED_TOKEN));
        assert!(!allowed(""));
    }

    #[test]
    fn tokens_are_who_the_table_says() {
        assert_eq!(token(ADMIN_TOKEN)["user"]["username"], ADMIN_USER);
        assert_eq!(
            token(UNPRIVILEGED_TOKEN)["user"]["username"],
            UNPRIVILEGED_USER
        );
        assert_eq!(
            token(UNPRIVILEGED_TOKEN)["user"]["groups"],
            json!(["system:authenticated"])
        );
        assert_eq!(token("guess")["authenticated"], false);
        assert_eq!(token("")["authenticated"], false);
    }

    #[test]
    fn only_system_masters_is_allowed() {
        assert!(access(json!(["system:masters", "system:authenticated"])));
        assert!(!access(json!(["system:authenticated"])));
        assert!(!access(json!(null)));
    }

    #[test]
    fn a_review_of_another_kind_is_refused() {
        let body = json!({"apiVersion": "v1", "kind": "Pod"}).to_string();
        assert_eq!(token_review(body.as_bytes()).unwrap_err().code, 400);
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                          "spec": {"user": "u"}})
        .to_string();
        assert_eq!(
            subject_access_review(body.as_bytes(), &ClusterStore::default())
                .unwrap_err()
                .code,
            400
        );
    }
}
