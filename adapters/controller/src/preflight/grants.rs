//! The `rbac` check: each permission the mode needs, asked of the API server for the identity
//! the controller runs as. By default that is the caller (SelfSubjectAccessReviews, as `kubectl
//! auth can-i`: in the cluster the caller is the controller's ServiceAccount); with
//! `--service-account NS/NAME` it is that ServiceAccount (SubjectAccessReviews, which an
//! operator's identity may create where the ServiceAccount's own grants are what matter). When
//! the caller may not create SubjectAccessReviews, the caller's own grants are asked instead and
//! the check warns that the ServiceAccount's were not.

use super::{Check, Options, Permission, Verdict, needed};
use engine::runtime::Mode;
use kube::Client;
use serde_json::{Value, json};

const NAME: &str = "rbac";

/// A ServiceAccount, as `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// The ServiceAccount the shipped manifests run the controller as.
    pub fn shipped() -> ServiceAccount {
        ServiceAccount {
            namespace: "lifecycle-system".to_string(),
            name: "lifecycle-controller".to_string(),
        }
    }

    /// `NAMESPACE/NAME`, each a DNS-1123 name.
    pub fn parse(text: &str) -> Result<ServiceAccount, String> {
        let (namespace, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: expected NAMESPACE/NAME"))?;
        let valid = |s: &str| {
            !s.is_empty()
                && s.len() <= 253
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
                && s.starts_with(|c: char| c.is_ascii_alphanumeric())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        };
        if !valid(namespace) || !valid(name) {
            return Err(format!(
                "{text:?}: the namespace and the name must be lowercase DNS names (a-z, 0-9, '-', '.')"
            ));
        }
        Ok(ServiceAccount {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// The user name the API server gives its tokens.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups the API server gives its tokens.
    pub fn groups(&self) -> [String; 3] {
        [
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".to_string(),
        ]
    }
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Whose grants are asked.
#[derive(Clone, Copy, Debug)]
enum Asked<'a> {
    Caller,
    Account(&'a ServiceAccount),
}

/// Why a permission could not be asked.
enum Unasked {
    /// The review was refused (403): the caller may not create such reviews.
    Refused(String),
    Failed(String),
}

fn resource_attributes(p: &Permission, namespace: Option<&str>) -> Value {
    let (resource, subresource) = p.resource.split_once('/').unwrap_or((p.resource, ""));
    json!({"group": p.group, "resource": resource, "subresource": subresource, "verb": p.verb,
           "namespace": namespace})
}

/// Whether `asked` may do `p`.
async fn allowed(
    client: &Client,
    asked: Asked<'_>,
    p: &Permission,
    namespace: Option<&str>,
) -> Result<bool, Unasked> {
    let attributes = resource_attributes(p, namespace);
    let (path, review) = match asked {
        Asked::Caller => (
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "spec": {"resourceAttributes": attributes}}),
        ),
        Asked::Account(sa) => (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": sa.user(), "groups": sa.groups(),
                            "resourceAttributes": attributes}}),
        ),
    };
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(review.to_string().into_bytes())
        .map_err(|e| Unasked::Failed(e.to_string()))?;
    match client.request::<Value>(request).await {
        Ok(review) => Ok(review["status"]["allowed"] == true),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(Unasked::Refused(s.message)),
        Err(e) => Err(Unasked::Failed(e.to_string())),
    }
}

/// The permissions of `needed` that `asked` lacks.
async fn denied(
    client: &Client,
    asked: Asked<'_>,
    needed: &[Permission],
    namespace: Option<&str>,
) -> Result<Vec<Permission>, Unasked> {
    let mut denied = Vec::new();
    for p in needed {
        if !allowed(client, asked, p, namespace).await? {
            denied.push(*p);
        }
    }
    Ok(denied)
}

fn overlay(mode: Mode) -> &'static str {
    match mode {
        Mode::Shadow => "adapters/deploy/shadow",
        Mode::Takeover => "adapters/deploy/takeover",
        Mode::Alone => "adapters/deploy/base",
    }
}

/// Each permission the mode needs, asked for `options.service_account` or the caller.
pub(super) async fn check(client: &Client, options: &Options) -> Check {
    let needed = needed(options.mode);
    let ns = options.namespace.as_deref();
    let mut limitation = None;
    let (whom, answer) = match &options.service_account {
        Some(sa) => match denied(client, Asked::Account(sa), &needed, ns).await {
            Err(Unasked::Refused(why)) => {
                limitation = Some(format!(
                    "the ServiceAccount {sa}'s grants were not checked: creating subjectaccessreviews is not allowed ({why}); the caller's own grants were checked instead"
                ));
                (
                    "the caller".to_string(),
                    denied(client, Asked::Caller, &needed, ns).await,
                )
            }
            answer => (format!("the ServiceAccount {sa}"), answer),
        },
        None => (
            "the caller".to_string(),
            denied(client, Asked::Caller, &needed, ns).await,
        ),
    };
    let denied = match answer {
        Ok(denied) => denied,
        Err(Unasked::Refused(why) | Unasked::Failed(why)) => {
            return Check::not_ok(
                NAME,
                Verdict::Warn,
                format!("cannot ask the API what {whom} may do: {why}"),
                "allow create on selfsubjectaccessreviews (Kubernetes grants it to every authenticated user by default), and on subjectaccessreviews to check a ServiceAccount".to_string(),
            );
        }
    };
    verdict(options.mode, needed.len(), &whom, &denied, limitation)
}

/// The check's answer once `denied` of the `needed` permissions were refused to `whom`. The
/// kubeconfig Secrets alone refused warn, not fail: a Role per namespace may grant them by name
/// (`adapters/deploy/components/kubeconfig-secrets-by-name`), which a review of the whole
/// cluster cannot see; a cluster whose Secret cannot be read is then reported unreachable
/// (`SecretUnreadable`).
fn verdict(
    mode: Mode,
    needed: usize,
    whom: &str,
    denied: &[Permission],
    limitation: Option<String>,
) -> Check {
    let overlay = overlay(mode);
    let list = |ps: &[&Permission]| {
        ps.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let limited = limitation
        .as_ref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    let (secrets, others): (Vec<&Permission>, Vec<&Permission>) = denied
        .iter()
        .partition(|p| p.group.is_empty() && p.resource == "secrets");
    if !others.is_empty() {
        let denied: Vec<&Permission> = denied.iter().collect();
        return Check::not_ok(
            NAME,
            Verdict::Fail,
            format!("not granted to {whom}: {}{limited}", list(&denied)),
            format!(
                "apply the RBAC of {overlay} (its ClusterRole lifecycle-manager-core) to this identity"
            ),
        );
    }
    if !secrets.is_empty() {
        return Check::not_ok(
            NAME,
            Verdict::Warn,
            format!(
                "not granted to {whom} in every namespace: {} (the kubeconfig Secrets){limited}",
                list(&secrets)
            ),
            format!(
                "with adapters/deploy/components/kubeconfig-secrets-by-name, make sure each namespace holding Clusters has its Role listing their kubeconfig Secrets; otherwise apply the RBAC of {overlay}"
            ),
        );
    }
    let granted = format!("the {needed} permissions --mode {mode} needs are granted to {whom}");
    match limitation {
        Some(l) => Check::not_ok(
            NAME,
            Verdict::Warn,
            format!("{granted}; {l}"),
            "allow this identity to create subjectaccessreviews (authorization.k8s.io), or run preflight as the ServiceAccount itself".to_string(),
        ),
        None => Check::ok(NAME, granted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_reads_as_namespace_slash_name() {
        let sa = ServiceAccount::parse("lifecycle-system/lifecycle-controller").unwrap();
        assert_eq!(sa, ServiceAccount::shipped());
        assert_eq!(
            sa.user(),
            "system:serviceaccount:lifecycle-system:lifecycle-controller"
        );
        assert_eq!(sa.groups()[1], "system:serviceaccounts:lifecycle-system");
        for bad in ["", "x", "/x", "x/", "A/b", "a/b/c", "a/-b", "a b/c"] {
            assert!(ServiceAccount::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn denied(mode: Mode, resources: &[&str]) -> Vec<Permission> {
        needed(mode)
            .into_iter()
            .filter(|p| resources.contains(&p.resource))
            .collect()
    }

    /// The kubeconfig Secrets refused alone warn (a Role per namespace may grant them by name);
    /// anything else refused fails, naming every refusal.
    #[test]
    fn secrets_refused_alone_warn_and_anything_else_fails() {
        let n = needed(Mode::Takeover).len();
        let verdict =
            |denied: &[Permission]| verdict(Mode::Takeover, n, "the caller", denied, None);
        assert_eq!(verdict(&[]).verdict, Verdict::Ok);
        let secrets = verdict(&denied(Mode::Takeover, &["secrets"]));
        assert_eq!(secrets.verdict, Verdict::Warn, "{secrets:?}");
        assert!(secrets.detail.contains("get secrets"), "{secrets:?}");
        assert!(
            secrets
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("kubeconfig-secrets-by-name")),
            "{secrets:?}"
        );
        let both = verdict(&denied(Mode::Takeover, &["secrets", "machines"]));
        assert_eq!(both.verdict, Verdict::Fail, "{both:?}");
        assert!(
            both.detail.contains("list secrets") && both.detail.contains("patch machines"),
            "{both:?}"
        );
    }
}
