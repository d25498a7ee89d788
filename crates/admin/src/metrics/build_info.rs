//! `kubernetes_build_info`: which kproxy build runs, with the labels
//! upstream's component-base gives it, so dashboards that group by
//! `git_version` work unchanged.

use super::labels::BuildInfoLabels;

/// What the binary knows of its own build (the cli fills it in from its
/// build environment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// kproxy's version, `0.1.0`.
    pub version: String,
    /// The commit built, or `unknown`.
    pub git_commit: String,
    /// When it was built (RFC 3339), or `unknown`.
    pub build_date: String,
}

impl Default for BuildInfo {
    fn default() -> Self {
        Self { version: "unknown".into(), git_commit: "unknown".into(), build_date: "unknown".into() }
    }
}

impl BuildInfo {
    /// The labels, in component-base's terms: `git_version` is kproxy's
    /// version with upstream's `v`, `major` and `minor` its first two
    /// numbers, `compiler` is `rustc` and `go_version` is empty (there is
    /// no Go), `platform` is `os/arch` spelled as Go spells it.
    pub fn labels(&self) -> BuildInfoLabels {
        let mut numbers = self.version.split(['.', '-', '+']);
        let major = numbers.next().unwrap_or_default().to_owned();
        let minor = numbers.next().unwrap_or_default().to_owned();
        let git_version = if self.version.starts_with(|c: char| c.is_ascii_digit()) {
            format!("v{}", self.version)
        } else {
            self.version.clone()
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        BuildInfoLabels {
            major,
            minor,
            git_version,
            git_commit: self.git_commit.clone(),
            git_tree_state: String::new(),
            build_date: self.build_date.clone(),
            go_version: String::new(),
            compiler: "rustc".into(),
            platform: format!("{}/{arch}", std::env::consts::OS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_split_as_component_base_splits_it() {
        let info = BuildInfo { version: "0.4.2".into(), git_commit: "abc123".into(), build_date: "2026-12-02".into() };
        let labels = info.labels();
        assert_eq!((labels.major.as_str(), labels.minor.as_str()), ("0", "4"));
        assert_eq!(labels.git_version, "v0.4.2");
        assert_eq!((labels.git_commit.as_str(), labels.build_date.as_str()), ("abc123", "2026-12-02"));
        assert!(labels.platform.starts_with("linux/"), "{}", labels.platform);
    }
}
