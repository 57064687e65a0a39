//! The real API server's rules for `metadata.labels` and `metadata.annotations`, for every
//! kind: a key is a qualified name (an optional DNS-1123 subdomain prefix and `/`, then a name
//! of at most [`NAME_LENGTH_MAX`] ASCII alphanumerics, `-`, `_` or `.` that starts and ends
//! alphanumeric); a label value is empty or such a name; annotation keys are judged lowercased,
//! as the real server judges them. Messages are the real server's.
//!
//! An update is ratcheted as schema validation is (`validate.rs`): a label or annotation the
//! stored object already had as it is now is not judged again.

use super::names;
use super::validate::Cause;
use serde_json::{Map, Value};

/// Longest name part of a key, and longest label value (bytes, all ASCII when valid).
const NAME_LENGTH_MAX: usize = 63;
/// Longest prefix of a key (a DNS-1123 subdomain).
const PREFIX_LENGTH_MAX: usize = 253;

const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const NAME_EXAMPLES: &str = "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const PREFIX_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, without a length limit.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && b.iter().all(inner)
        }
        _ => false,
    }
}

/// What is wrong with a qualified name (`IsQualifiedName`), one message per problem.
fn qualified_name_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let name = match key.split('/').collect::<Vec<_>>().as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > PREFIX_LENGTH_MAX {
                    problems.push(format!(
                        "prefix part must be no more than {PREFIX_LENGTH_MAX} characters"
                    ));
                }
                if !names::is_subdomain_format(prefix) {
                    problems.push(format!("prefix part {PREFIX_RULE}"));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {NAME_RULE} {NAME_EXAMPLES} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > NAME_LENGTH_MAX {
        problems.push(format!(
            "name part must be no more than {NAME_LENGTH_MAX} characters"
        ));
    }
    if !is_name(name) {
        problems.push(format!("name part {NAME_RULE} {NAME_EXAMPLES}"));
    }
    problems
}

/// What is wrong with a label value (`IsValidLabelValue`).
fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > NAME_LENGTH_MAX {
        problems.push(format!("must be no more than {NAME_LENGTH_MAX} characters"));
    }
    if !value.is_empty() && !is_name(value) {
        problems.push(VALUE_RULE.to_string());
    }
    problems
}

/// The two maps of `metadata` that are checked, by their field name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MetaMap {
    Labels,
    Annotations,
}

impl MetaMap {
    fn field(self) -> &'static str {
        match self {
            MetaMap::Labels => "labels",
            MetaMap::Annotations => "annotations",
        }
    }

    /// Every problem of one entry, each quoting what it is about.
    fn entry_problems(self, key: &str, value: &Value) -> Vec<(String, String)> {
        let key_problems = match self {
            MetaMap::Labels => qualified_name_problems(key),
            MetaMap::Annotations => qualified_name_problems(&key.to_lowercase()),
        };
        let mut problems: Vec<(String, String)> = key_problems
            .into_iter()
            .map(|p| (key.to_string(), p))
            .collect();
        if let (MetaMap::Labels, Some(v)) = (self, value.as_str()) {
            problems.extend(
                label_value_problems(v)
                    .into_iter()
                    .map(|p| (v.to_string(), p)),
            );
        }
        problems
    }
}

fn meta_map(object: &Value, which: MetaMap) -> Option<&Map<String, Value>> {
    object.get("metadata")?.get(which.field())?.as_object()
}

/// The problems of `object`'s labels and annotation keys, as 422 causes (field
/// `metadata.labels` / `metadata.annotations`); entries `old` has as they are are not judged.
pub fn causes(object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    for which in [MetaMap::Labels, MetaMap::Annotations] {
        let Some(entries) = meta_map(object, which) else {
            continue;
        };
        let was = old.and_then(|o| meta_map(o, which));
        for (key, value) in entries {
            if was.is_some_and(|w| w.get(key) == Some(value)) {
                continue;
            }
            for (quoted, problem) in which.entry_problems(key, value) {
                causes.push(Cause {
                    reason: "FieldValueInvalid",
                    message: format!("Invalid value: {quoted:?}: {problem}"),
                    field: format!("metadata.{}", which.field()),
                    pointer: format!(
                        "/metadata/{}/{}",
                        which.field(),
                        key.replace('~', "~0").replace('/', "~1")
                    ),
                });
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qualified_names() {
        for good in [
            "a",
            "A_b.c-9",
            "example.com/MyName",
            "cluster.x-k8s.io/cluster-name",
        ] {
            assert!(qualified_name_problems(good).is_empty(), "{good}");
        }
        for bad in [
            "",
            "ü",
            "-a",
            "a/b/c",
            "/a",
            "Example.com/a",
            "x/",
            &"a".repeat(64),
        ] {
            assert!(!qualified_name_problems(bad).is_empty(), "{bad:?}");
        }
        assert_eq!(
            qualified_name_problems(&"a".repeat(64)),
            ["name part must be no more than 63 characters"]
        );
    }

    #[test]
    fn label_values() {
        for good in ["", "v", "My_value.1", &"a".repeat(63)] {
            assert!(label_value_problems(good).is_empty(), "{good:?}");
        }
        for bad in ["ü", "a b", "-a", "a-", &"a".repeat(64)] {
            assert!(!label_value_problems(bad).is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn annotation_keys_are_judged_lowercased_and_unchanged_entries_are_not_judged() {
        let object = json!({"metadata": {
            "labels": {"ok": "ü"},
            "annotations": {"Example.COM/Key": "any value ü", "ünïcode": "x"}}});
        let fields: Vec<(String, String)> = causes(&object, None)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect();
        assert_eq!(fields.len(), 2, "{fields:#?}");
        assert_eq!(fields[0].0, "metadata.labels");
        assert!(
            fields[0]
                .1
                .starts_with("Invalid value: \"ü\": a valid label")
        );
        assert_eq!(fields[1].0, "metadata.annotations");
        assert!(
            fields[1]
                .1
                .starts_with("Invalid value: \"ünïcode\": name part must consist")
        );
        assert!(causes(&object, Some(&object)).is_empty());
    }
}
