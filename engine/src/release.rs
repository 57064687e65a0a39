//! Cluster API releases: read from the manager's image tag (or given), and the table of those
//! this build is known to run beside.

use std::fmt;

/// The Cluster API minors this controller is known to run beside: they serve
/// `cluster.x-k8s.io/v1beta2` as the storage version (v1.11 made it so), write `Deleting` with
/// the hook reasons, and run a Machine's deletion in the order the takeover follows (hooks,
/// drain, volume detach, hooks, infrastructure, bootstrap, Node, finalizer). The README's
/// "Supported Cluster API versions" table says the same.
pub const SUPPORTED_MINORS: [(u32, u32); 4] = [(1, 11), (1, 12), (1, 13), (1, 14)];

/// A Cluster API release, `v1.12.3` or `v1.13.0-rc.1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    pub pre: Option<String>,
}

/// Where a release stands against [`SUPPORTED_MINORS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    /// Older than the table: it does not serve what this controller reads.
    TooOld,
    /// Newer, or another major: not known to behave as the takeover expects.
    Unknown,
}

impl Release {
    /// `v1.12.3` (the `v` optional), with an optional `-pre` suffix.
    pub fn parse(text: &str) -> Result<Release, String> {
        let bad = || format!("{text:?} is not a release (vMAJOR.MINOR.PATCH, e.g. v1.12.3)");
        let text = text.strip_prefix('v').unwrap_or(text);
        let (numbers, pre) = match text.split_once('-') {
            Some((n, pre)) if !pre.is_empty() => (n, Some(pre.to_string())),
            Some(_) => return Err(bad()),
            None => (text, None),
        };
        let parts: Vec<u32> = numbers
            .split('.')
            .map(|p| p.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match parts.as_slice() {
            [major, minor, patch] => Ok(Release {
                major: *major,
                minor: *minor,
                patch: *patch,
                pre,
            }),
            _ => Err(bad()),
        }
    }

    /// The release an image reference names by its tag
    /// (`registry.k8s.io/cluster-api/cluster-api-controller:v1.12.3`); `None` for a digest or
    /// a tag that is no release.
    pub fn of_image(image: &str) -> Option<Release> {
        let name = image.rsplit('/').next()?;
        let (_, tag) = name.split_once(':')?;
        if name.contains('@') {
            return None;
        }
        Release::parse(tag).ok()
    }

    pub fn support(&self) -> Support {
        if SUPPORTED_MINORS.contains(&(self.major, self.minor)) {
            Support::Supported
        } else if (self.major, self.minor) < SUPPORTED_MINORS[0] {
            Support::TooOld
        } else {
            Support::Unknown
        }
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

impl Release {
    /// This build's judgement of the release, as the engine is told it
    /// ([`crate::Input::CapiRelease`]): older than the table is unsupported, newer or another
    /// major unknown.
    pub fn judged(&self) -> crate::ownership::CapiRelease {
        use crate::ownership::ReleaseSupport;
        crate::ownership::CapiRelease {
            release: self.to_string(),
            support: match self.support() {
                Support::Supported => ReleaseSupport::Supported,
                Support::Unknown => ReleaseSupport::Unknown,
                Support::TooOld => ReleaseSupport::Unsupported,
            },
        }
    }
}

/// The supported minors as the README writes them: `v1.11, v1.12, v1.13, v1.14`.
pub fn supported_text() -> String {
    SUPPORTED_MINORS
        .iter()
        .map(|(major, minor)| format!("v{major}.{minor}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_read_from_image_tags() {
        let r = Release::of_image("registry.k8s.io/cluster-api/cluster-api-controller:v1.12.3");
        assert_eq!(r.map(|r| r.to_string()), Some("v1.12.3".to_string()));
        let r = Release::of_image("my.registry:5000/capi/manager:v1.13.0-rc.1").unwrap();
        assert_eq!((r.minor, r.pre.as_deref()), (13, Some("rc.1")));
        assert_eq!(Release::of_image("registry.k8s.io/capi@sha256:abc"), None);
        assert_eq!(Release::of_image("registry.k8s.io/capi:latest"), None);
        assert_eq!(Release::of_image("registry.k8s.io/capi"), None);
    }

    #[test]
    fn support_follows_the_table() {
        let support = |t: &str| Release::parse(t).unwrap().support();
        assert_eq!(support("v1.12.0"), Support::Supported);
        assert_eq!(support("1.11.9"), Support::Supported);
        assert_eq!(support("v1.10.4"), Support::TooOld);
        assert_eq!(support("v1.15.0"), Support::Unknown);
        assert_eq!(support("v2.0.0"), Support::Unknown);
        assert!(Release::parse("v1.12").is_err());
        assert!(Release::parse("v1.12.x").is_err());
        assert!(Release::parse("v1.12.0-").is_err());
    }
}

#[cfg(test)]
mod readme {
    /// The README's table names the supported releases this build checks against.
    #[test]
    fn the_readmes_table_is_the_supported_list() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("### Supported Cluster API versions")
            .nth(1)
            .expect("the README has the table");
        let row = section
            .lines()
            .find(|l| l.contains("| yes | yes | yes |"))
            .expect("the supported row");
        assert!(
            row.starts_with(&format!("| {} |", super::supported_text())),
            "{row}"
        );
    }
}
