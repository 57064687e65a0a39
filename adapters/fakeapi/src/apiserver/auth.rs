//! TokenReview and SubjectAccessReview, with a fixed notion of who is who, so that what
//! delegates authentication and authorization to the API server (the controller's secure
//! `/metrics`) can be tested against it. Requests themselves are not authenticated.
//!
//! | token | user | may |
//! |---|---|---|
//! | [`ADMIN_TOKEN`] (in every kubeconfig the server writes) | [`ADMIN_USER`], group `system:masters` | everything |
//! | [`UNPRIVILEGED_TOKEN`] | [`UNPRIVILEGED_USER`], group `system:authenticated` | nothing |
//! | any other | not authenticated | |

use super::status::Failure;
use serde_json::{Value, json};

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

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: allowed for `system:masters`
/// only (as RBAC with no bindings for anyone else would answer).
pub fn subject_access_review(body: &[u8]) -> Result<Value, Failure> {
    let mut review = review_body(body, "SubjectAccessReview", AUTHORIZATION_GROUP)?;
    let spec = &review["spec"];
    if spec.get("resourceAttributes").is_none() && spec.get("nonResourceAttributes").is_none() {
        return Err(Failure::bad_request(
            "spec.resourceAttributes or spec.nonResourceAttributes is required",
        ));
    }
    let masters = spec["groups"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g == "system:masters"));
    review["status"] = if masters {
        json!({"allowed": true, "reason": "the user is in system:masters"})
    } else {
        json!({"allowed": false, "reason": "no RBAC policy matched"})
    };
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(review)
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (`kubectl auth can-i`): the
/// asker is who its bearer `token` says, allowed as [`subject_access_review`] would allow them.
pub fn self_subject_access_review(body: &[u8], token: &str) -> Result<Value, Failure> {
    let mut review = review_body(body, "SelfSubjectAccessReview", AUTHORIZATION_GROUP)?;
    let spec = &review["spec"];
    if spec.get("resourceAttributes").is_none() && spec.get("nonResourceAttributes").is_none() {
        return Err(Failure::bad_request(
            "spec.resourceAttributes or spec.nonResourceAttributes is required",
        ));
    }
    review["status"] = match identity(token) {
        Some((_, groups)) if groups.contains(&"system:masters") => {
            json!({"allowed": true, "reason": "the user is in system:masters"})
        }
        _ => json!({"allowed": false, "reason": "no RBAC policy matched"}),
    };
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
        subject_access_review(body.to_string().as_bytes()).unwrap()["status"]["allowed"]
            .as_bool()
            .unwrap()
    }

    #[test]
    fn a_self_review_answers_for_the_bearer() {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                          "spec": {"resourceAttributes": {"group": "cluster.x-k8s.io",
                                   "resource": "machines", "verb": "patch"}}});
        let allowed = |token: &str| {
            self_subject_access_review(body.to_string().as_bytes(), token).unwrap()["status"]
                ["allowed"]
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
            subject_access_review(body.as_bytes()).unwrap_err().code,
            400
        );
    }
}
