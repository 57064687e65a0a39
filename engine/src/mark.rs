//! Coverage marks (after TigerBeetle's `testing/marks.zig`): a rare branch says
//! `mark::hit("name")`, and the test written to reach it holds `mark::check("name")`, which
//! fails the test if the branch was not taken while it was held. A mark ties the branch to
//! its test both ways: grep the name to find one from the other, and a change that stops the
//! test reaching the branch fails it instead of leaving it green and useless.
//!
//! Recorded per thread (a test runs on one) and only in the engine's own unit tests; in any
//! other build `hit` is empty.

#[cfg(test)]
use std::cell::RefCell;
#[cfg(test)]
use std::collections::BTreeMap;

#[cfg(test)]
thread_local! {
    static HITS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// The branch named `name` was taken.
#[inline]
pub fn hit(name: &'static str) {
    #[cfg(test)]
    HITS.with(|hits| *hits.borrow_mut().entry(name).or_default() += 1);
    #[cfg(not(test))]
    let _ = name;
}

#[cfg(test)]
fn hits(name: &str) -> u64 {
    HITS.with(|hits| hits.borrow().get(name).copied().unwrap_or(0))
}

/// Fails the test when dropped unless the branch `name` was taken since this was made.
#[cfg(test)]
#[must_use = "the check is made when this is dropped"]
pub struct Check {
    name: &'static str,
    before: u64,
}

#[cfg(test)]
pub fn check(name: &'static str) -> Check {
    Check {
        name,
        before: hits(name),
    }
}

#[cfg(test)]
impl Drop for Check {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert!(
                hits(self.name) > self.before,
                "coverage mark {:?} was not hit",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_mark_passes() {
        let _mark = check("test_mark");
        hit("test_mark");
    }

    #[test]
    #[should_panic(expected = "coverage mark \"test_mark_missed\" was not hit")]
    fn a_mark_not_hit_fails_the_test() {
        let _mark = check("test_mark_missed");
        hit("another_mark");
    }
}
