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

#[test]
fn write_config_to_writes_a_file_that_config_reads_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.yaml");
    let out = kproxy(&[
        "run",
        "--proxy-mode",
        "ipvs",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--hostname-override",
        "node-a",
        "--conntrack-min",
        "1000",
        "--write-config-to",
        &first.display().to_string(),
    ]);
    // No source, no root needed: it only writes and exits.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&first).unwrap();
    assert!(text.starts_with("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"), "{text}");
    for line in ["mode: ipvs", "clusterCIDR: 10.244.0.0/16", "hostnameOverride: node-a", "  min: 1000"] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }

    // Read back and written again (as JSON this time): the same document.
    let second = dir.path().join("second.json");
    let out =
        kproxy(&["run", "--config", &first.display().to_string(), "--write-config-to", &second.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("has no effect"), "a written file warns about nothing:\n{}", stderr(&out));
    let first: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let second: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&second).unwrap()).unwrap();
    assert_eq!(first, second);
}

#[test]
fn write_config_to_names_the_flags_a_file_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml").display().to_string();
    let out = kproxy(&["run", "--service-cidrs", "10.96.0.0/12", "--write-config-to", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(log.contains("--service-cidrs") && log.contains("no field for this flag"), "{log}");
}

#[test]
fn write_config_to_an_unwritable_place_fails_naming_it() {
    let out = kproxy(&["run", "--write-config-to", "/nonexistent/dir/c.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("kproxy: --write-config-to /nonexistent/dir/c.yaml: cannot write"),
        "{}",
        stderr(&out)
    );
}

mod running;

#[test]
fn configz_serves_the_document_write_config_to_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "c.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nnftables:\n  syncPeriod: 1m\n",
    );
    let config = config.display().to_string();
    let (_kproxy, healthz, metrics) =
        running::start(&["--manifests", &example(), "--config", &config, "--hostname-override", "node-a", "--dry-run"]);
    let body = running::eventually_ok(metrics, "/configz");
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    let document = &served["kubeproxy.config.k8s.io"];
    assert_eq!(document["nftables"]["syncPeriod"], "1m0s", "{body}");

    // The same flags with --write-config-to write the same document, but
    // for the servers' addresses, which the test chose.
    let written = dir.path().join("w.json");
    let out = kproxy(&[
        "run",
        "--config",
        &config,
        "--hostname-override",
        "node-a",
        "--healthz-bind-address",
        &format!("127.0.0.1:{healthz}"),
        "--metrics-bind-address",
        &format!("127.0.0.1:{metrics}"),
        "--write-config-to",
        &written.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    assert_eq!(document, &written);
}

#[test]
fn state_names_unknown_manifest_fields_and_serves_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let service = |name: &str, ip_key: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{{ip_key}: 10.96.0.1, ports: [{{port: 80{extra}}}]}}\n"
        )
    };
    write(dir.path(), "a.yaml", &service("typo", "clusterIp", ""));
    write(dir.path(), "b.yaml", &service("extra", "clusterIP", ", tagretPort: 8080"));
    let out = kproxy(&["state", "--manifests", &dir.path().display().to_string(), "--hostname-override", "n"]);
    // A skipped document makes `state` exit 1; the rest is still printed.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains(
            "Service default/typo: spec.clusterIp: unknown field (did you mean clusterIP?); spec.clusterIP: must be set"
        ),
        "{log}"
    );
    assert!(
        log.contains("warning: ")
            && log
                .contains("Service default/extra: spec.ports[0].tagretPort: unknown field (did you mean targetPort?)"),
        "{log}"
    );
    assert!(stdout(&out).lines().any(|l| l.starts_with("default/extra ")), "{}", stdout(&out));
}

#[test]
fn a_non_root_start_says_nothing_will_be_programmed_and_healthz_shows_the_dry_run() {
    use std::os::unix::process::CommandExt;
    let (healthz, metrics) = (running::free_port(), running::free_port());
    let log = tempfile::NamedTempFile::new().unwrap();
    // As root the test drops to nobody; as anyone else it already is not root.
    let mut command = Command::new(env!("CARGO_BIN_EXE_kproxy"));
    command
        .args(["run", "--manifests", &example(), "--hostname-override", "node-a"])
        .args(["--healthz-bind-address", &format!("127.0.0.1:{healthz}")])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().unwrap());
    if is_root() {
        command.uid(65534).gid(65534);
    }
    let kproxy = running::Running(command.spawn().unwrap());
    let body = running::eventually_ok(healthz, "/healthz");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["mode"], "dry-run", "{body}");
    let livez: serde_json::Value = serde_json::from_str(&running::eventually_ok(healthz, "/livez")).unwrap();
    assert_eq!(livez["mode"], "dry-run");
    drop(kproxy);
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        log.contains("not running as root: falling back to a dry run; nothing will be programmed on this node"),
        "{log}"
    );
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1)) == Some("0")
}

#[test]
fn an_empty_cluster_cidr_with_the_cluster_cidr_detector_is_a_warning() {
    let dir = example();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--manifests", dir.as_str(), "--dry-run", "--once"];
        args.extend_from_slice(extra);
        let out = kproxy(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let off = "local traffic detection is off";
    assert!(run(&[]).contains(off));
    assert!(!run(&["--cluster-cidr", "10.244.0.0/16"]).contains(off));
    assert!(!run(&["--detect-local-mode", "NodeCIDR"]).contains(off));
}

#[test]
fn a_hostname_override_naming_no_node_object_is_a_warning() {
    let warned = |node: &str| {
        let out = kproxy(&["run", "--manifests", &example(), "--hostname-override", node, "--dry-run", "--once"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out).contains("--hostname-override names a node that no Node object has")
    };
    // examples/basic has Nodes node-a and node-b.
    assert!(!warned("node-a"));
    assert!(warned("node-z"));
}
