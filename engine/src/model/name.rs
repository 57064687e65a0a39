//! [`Name`]: the string type of object keys.
//!
//! Why: keys are cloned on every routed change and compared on every lookup. As `String`s a
//! key clone cost four allocations, and comparing two keys of one workload cluster began with
//! two `memcmp`s of equal cluster names. A `Name` is a shared immutable string: a clone is a
//! reference-count increment, and two clones compare equal by pointer before any byte is read.
//! Order, equality, hashing, `Debug` and serde are those of the string.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

#[derive(Clone)]
pub struct Name(Arc<str>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The empty name (every cluster-scoped key's namespace), shared rather than allocated.
    fn empty() -> Name {
        static EMPTY: LazyLock<Name> = LazyLock::new(|| Name(Arc::from("")));
        EMPTY.clone()
    }

    /// `s` as a name shared with every other `interned` one of the same text on this thread:
    /// for the few values most keys repeat (namespaces, kinds, API groups). Equal shared
    /// names compare by pointer, so a key comparison reads no bytes of them (in a large map,
    /// each read was a cache miss, one heap copy per key). Past [`INTERNED_MAX`] distinct
    /// texts a name is allocated as `Name::from` would: the table never grows without bound.
    pub fn interned(s: &str) -> Name {
        if s.is_empty() {
            return Name::empty();
        }
        INTERNED.with_borrow_mut(|interner| interner.share(s))
    }
}

/// Distinct texts [`Name::interned`] shares per thread.
pub const INTERNED_MAX: usize = 4096;

#[derive(Default)]
struct Interner {
    shared: HashSet<Name, BuildHasherDefault<crate::fnv::Fnv>>,
}

impl Interner {
    fn share(&mut self, s: &str) -> Name {
        if let Some(name) = self.shared.get(s) {
            return name.clone();
        }
        let name = Name(Arc::from(s));
        if self.shared.len() < INTERNED_MAX {
            self.shared.insert(name.clone());
        }
        name
    }
}

thread_local! {
    static INTERNED: std::cell::RefCell<Interner> = std::cell::RefCell::default();
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Default for Name {
    fn default() -> Self {
        Name::from("")
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Name {}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        if s.is_empty() {
            return Name::empty();
        }
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        if s.is_empty() {
            return Name::empty();
        }
        Name(Arc::from(s))
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Name::from(s.as_str())
    }
}

impl From<&Name> for Name {
    fn from(s: &Name) -> Self {
        s.clone()
    }
}

impl From<Name> for String {
    fn from(s: Name) -> Self {
        s.as_str().to_string()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Name::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_names_are_shared_until_the_table_is_full() {
        let a = Name::interned("default");
        let b = Name::interned(&String::from("default"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, Name::from("default"));
        assert!(Arc::ptr_eq(&Name::interned("").0, &Name::from("").0));
        for i in 0..INTERNED_MAX {
            Name::interned(&format!("ns-{i}"));
        }
        let late = Name::interned("late");
        assert_eq!(late, Name::interned("late"));
        assert!(
            !Arc::ptr_eq(&late.0, &Name::interned("late").0),
            "the table is full"
        );
        assert!(Arc::ptr_eq(&a.0, &Name::interned("default").0));
    }

    #[test]
    fn order_and_equality_are_the_strings_whether_or_not_shared() {
        let a = Name::from("web-1");
        let shared = a.clone();
        let copy = Name::from("web-1");
        let b = Name::from("web-10");
        assert_eq!(a, shared);
        assert_eq!(a, copy);
        assert_eq!(a.cmp(&copy), Ordering::Equal);
        assert_eq!(a.cmp(&b), "web-1".cmp("web-10"));
        assert_eq!(b.cmp(&a), Ordering::Greater);
        assert_eq!(format!("{a:?}/{a}"), "\"web-1\"/web-1");
        let encoded = crate::codec::encode(&a).unwrap();
        assert_eq!(encoded, crate::codec::encode(&"web-1".to_string()).unwrap());
        assert_eq!(crate::codec::decode::<Name>(&encoded).unwrap(), a);
    }
}
