//! What kproxy says about itself: its version, its effective configuration
//! (`--write-config-to`, `/configz`), and settings that are accepted but
//! have no effect.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic").display().to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn is_rfc3339_utc(s: &str) -> bool {
    s.len() == 20 && s.parse::<jiff::Timestamp>().is_ok() && s.ends_with('Z')
}

#[test]
fn version_flag_prints_the_release_commit_and_build_date() {
    let out = kproxy(&["--version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    let rest = line.trim_end().strip_prefix(&format!("kproxy {} (commit ", env!("CARGO_PKG_VERSION"))).unwrap();
    let (commit, rest) = rest.split_once(", built ").unwrap();
    assert!(commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
    let date = rest.strip_suffix(')').unwrap();
    assert!(is_rfc3339_utc(date), "{line}");
}

#[test]
fn version_command_prints_the_same_in_text_and_json() {
    let text = stdout(&kproxy(&["version"]));
    let json = kproxy(&["version", "-o", "json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    let expected = format!(
        "kproxy {}\ngit commit: {}\nbuild date: {}\n",
        env!("CARGO_PKG_VERSION"),
        json["gitCommit"].as_str().unwrap(),
        json["buildDate"].as_str().unwrap()
    );
    assert_eq!(text, expected);
    assert!(is_rfc3339_utc(json["buildDate"].as_str().unwrap()), "{json}");
    // In a git checkout the commit is HEAD: the build script reruns when
    // HEAD moves, so a test build after a commit carries the new one.
    let head =
        Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    if let Ok(head) = head
        && head.status.success()
        && std::env::var_os("KPROXY_GIT_COMMIT").is_none()
    {
        assert_eq!(json["gitCommit"], String::from_utf8_lossy(&head.stdout).trim(), "{json}");
    }
}
