//! Object name rules of the real API server: DNS-1123 labels for namespaces (and a namespace
//! given on a namespaced object), DNS-1123 subdomains for every other kind.

use super::resources::ResourceType;
use super::status::Failure;
use serde_json::json;

const LABEL_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= LABEL_MAX
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The DNS-1123 subdomain pattern (`[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`),
/// without the length limits.
pub(super) fn is_subdomain_format(s: &str) -> bool {
    s.split('.').all(|part| {
        let b = part.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= SUBDOMAIN_MAX && s.split('.').all(is_label)
}

fn problem(s: &str, label: bool) -> Option<String> {
    let ok = if label { is_label(s) } else { is_subdomain(s) };
    (!ok).then(|| {
        let what = if label {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        };
        format!("Invalid value: {s:?}: {what}")
    })
}

/// 422 Invalid with a `metadata.name` (or `metadata.namespace`) cause when a new object's
/// name or namespace breaks the rules for its kind.
pub fn check(t: &ResourceType, name: &str, namespace: &str) -> Result<(), Failure> {
    let name_problem = problem(name, t.kind == "Namespace").map(|m| ("metadata.name", m));
    let namespace_problem = (t.namespaced && !namespace.is_empty())
        .then(|| problem(namespace, true))
        .flatten()
        .map(|m| ("metadata.namespace", m));
    let Some((field, message)) = name_problem.or(namespace_problem) else {
        return Ok(());
    };
    let mut f = Failure::invalid(t, name, format!("{field}: {message}"));
    if let Some(d) = f.details.as_mut() {
        d["causes"] = json!([{"reason": "FieldValueInvalid", "message": message, "field": field}]);
    }
    Err(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(is_subdomain("m-1.example"));
        for bad in ["a/b", "..", "a\nb", "BAD", "-a", ""] {
            assert!(!is_subdomain(bad), "{bad:?}");
        }
        assert!(!is_subdomain(&"a".repeat(300)));
        assert!(!is_label("a.b"));
        assert!(!is_label("BAD_NS"));
    }
}
