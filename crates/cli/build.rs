//! Stamps the binary with the git commit and the build date.
//!
//! Sets `KPROXY_GIT_COMMIT` (the abbreviated commit, or `unknown` without
//! git or a repository) and `KPROXY_BUILD_DATE` (UTC, RFC 3339) for the
//! crate's `env!`. Packaging overrides either by exporting the variable of
//! the same name; `SOURCE_DATE_EPOCH` fixes the date for reproducible
//! builds. The script reruns only when the checked-out commit changes (or
//! one of those variables does), never on every build: the date is when
//! the script last ran, which is at least as new as the commit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in ["KPROXY_GIT_COMMIT", "KPROXY_BUILD_DATE", "SOURCE_DATE_EPOCH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = match non_empty_env("KPROXY_GIT_COMMIT") {
        Some(commit) => commit,
        None => {
            watch_head(&manifest_dir);
            git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    let date = non_empty_env("KPROXY_BUILD_DATE").unwrap_or_else(|| {
        let seconds =
            non_empty_env("SOURCE_DATE_EPOCH").and_then(|s| s.trim().parse::<i64>().ok()).unwrap_or_else(|| {
                SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
            });
        rfc3339(seconds)
    });
    println!("cargo:rustc-env=KPROXY_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KPROXY_BUILD_DATE={date}");
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `git ARGS` in `dir`, its trimmed output if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// Reruns the script when HEAD moves: the HEAD file (a worktree has its
/// own), the branch's loose ref and `packed-refs` (both in the common git
/// directory). Only existing files are named: cargo treats a missing one as
/// always changed.
fn watch_head(dir: &Path) {
    let absolute = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() { p } else { dir.join(p) }
    };
    let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]).map(absolute) else { return };
    let common_dir = git(dir, &["rev-parse", "--git-common-dir"]).map_or_else(|| git_dir.clone(), absolute);
    let head = git_dir.join("HEAD");
    let mut watched = vec![head.clone(), common_dir.join("packed-refs")];
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(reference) = text.trim().strip_prefix("ref: ")
    {
        watched.push(common_dir.join(reference));
        watched.push(git_dir.join(reference));
    }
    for path in watched.into_iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(seconds: i64) -> String {
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
