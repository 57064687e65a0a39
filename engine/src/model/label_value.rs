//! Label values as CAPI writes them: a name that is not a valid label value (longer than 63
//! characters, or with characters a label value may not hold) is replaced by a short hash, so a
//! long MachinePool name still fits its `cluster.x-k8s.io/pool-name` label.

use std::borrow::Cow;

/// `name` when it is a valid label value, else `hash_<base64url(fnv32a(name))>_z` (upstream's
/// `format.MustFormatValue`).
pub fn format_label_value(name: &str) -> Cow<'_, str> {
    if is_valid_label_value(name) {
        return Cow::Borrowed(name);
    }
    let hash = fnv32a(name.as_bytes()).to_be_bytes();
    Cow::Owned(format!("hash_{}_z", base64_url_no_pad(&hash)))
}

/// At most 63 characters: empty, or alphanumerics with `-`, `_` or `.` between them.
pub fn is_valid_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    match bytes {
        [] => true,
        _ if bytes.len() > 63 => false,
        [first, .., last] | [first @ last] => {
            first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && bytes.iter().all(inner)
        }
    }
}

/// Why `key` is not a label key (Kubernetes' qualified name: an optional DNS-1123 subdomain
/// prefix of at most 253 characters and `/`, then a name of 1 to 63 characters that is a
/// non-empty label value), or `None` when it is one.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(is_dns_label))
    {
        return Some(format!(
            "{key:?}: prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters"
        ));
    }
    if name.is_empty() || !is_valid_label_value(name) {
        return Some(format!(
            "{key:?}: name part must be 1 to 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    None
}

/// An RFC 1123 label (a namespace's name, a part of a DNS subdomain): 1 to 63 lowercase
/// alphanumerics or `-`, starting and ending with an alphanumeric.
pub fn is_dns_label(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

fn base64_url_no_pad(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 0x3f) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_follow_the_qualified_name_rules() {
        for ok in [
            "pool",
            "cluster.x-k8s.io/cluster-name",
            "a/b",
            "x_y.z",
            &"a".repeat(63),
        ] {
            assert_eq!(label_key_problem(ok), None, "{ok}");
        }
        for bad in [
            "bad key!!/x/y",
            "",
            "/name",
            "Example.com/x",
            "a/",
            "-a",
            "a b",
            &"a".repeat(64),
            &format!("{}/x", "a".repeat(254)),
        ] {
            assert!(label_key_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn valid_names_are_kept_and_others_hashed_as_upstream() {
        assert_eq!(format_label_value("pool-1"), "pool-1");
        assert_eq!(format_label_value(&"a".repeat(63)), "a".repeat(63));
        // Expected values computed independently (FNV-1a 32, big-endian, base64url, no pad).
        assert_eq!(format_label_value(&"a".repeat(64)), "hash_2W8PhQ_z");
        assert_eq!(
            format_label_value(
                "machine-pool-with-a-very-long-name-that-goes-past-the-label-limit-x"
            ),
            "hash_SxEwDA_z"
        );
        for invalid in ["-pool", "pool-", "pool/1", "pool 1"] {
            assert!(
                format_label_value(invalid).starts_with("hash_"),
                "{invalid}"
            );
        }
        for valid in ["", "a", "a.b_c-d", "A1"] {
            assert!(is_valid_label_value(valid), "{valid}");
        }
    }
}
