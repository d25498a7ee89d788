//! `kproxy run` as a process: it serves the admin endpoints and follows
//! changes to the manifest folder.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod running;

use running::{Running, eventually, free_port, get};

/// `kproxy run --dry-run` on `dir` with this minimum sync period, its
/// health and metrics on free loopback ports: (process, healthz, metrics).
fn dry_run(dir: &Path, min_sync_period: &str) -> (Running, u16, u16) {
    let dir = dir.display().to_string();
    // --dry-run: never program the test host's own namespace.
    running::start(&[
        "--manifests",
        &dir,
        "--hostname-override",
        "node-a",
        "--iptables-min-sync-period",
        min_sync_period,
        "--dry-run",
    ])
}

fn service(name: &str, ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
    )
}

fn service_names(state: &str) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(state).unwrap();
    let ports = json["ipv4"]["servicePorts"].as_array().unwrap();
    ports.iter().map(|p| p["name"]["service"]["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn run_serves_state_and_health_and_follows_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), service("alpha", "10.96.0.1")).unwrap();
    let (_running, healthz, metrics) = dry_run(dir.path(), "100ms");

    eventually("the first sync", || get(metrics, "/state").is_some_and(|(_, body)| service_names(&body) == ["alpha"]));
    let (status, body) = get(healthz, "/healthz").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""nodeEligible":true"#), "{body}");
    assert_eq!(get(metrics, "/proxyMode").unwrap().1, "dry-run");

    std::fs::write(dir.path().join("b.yaml"), service("beta", "10.96.0.2")).unwrap();
    std::fs::write(dir.path().join("bad.yaml"), service("gamma", "not-an-ip")).unwrap();
    eventually("beta to be served", || {
        get(metrics, "/state").is_some_and(|(_, body)| service_names(&body) == ["alpha", "beta"])
    });
    eventually("the bad document to be counted", || {
        get(metrics, "/metrics").is_some_and(|(_, body)| body.contains("kproxy_manifest_invalid_documents_total 1"))
    });
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    eventually("alpha to go", || get(metrics, "/state").is_some_and(|(_, body)| service_names(&body) == ["beta"]));
    let (_, body) = get(metrics, "/metrics").unwrap();
    assert!(body.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}"), "{body}");
    assert!(Path::new(dir.path()).exists());
}

/// A folder rewritten every 20 ms, faster than the 200 ms debounce, is
/// still read at least once per `minSyncPeriod` while the writer goes on.
#[test]
fn run_follows_a_folder_that_never_stops_changing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), service("v0", "10.96.0.1")).unwrap();
    let (_running, _healthz, metrics) = dry_run(dir.path(), "500ms");
    eventually("the first sync", || get(metrics, "/state").is_some_and(|(_, body)| service_names(&body) == ["v0"]));

    // At most 2,000 writes or 40 s, by atomic rename (no half-written file).
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let writer = {
        let (dir, stop, done) = (dir.path().to_owned(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            for i in 1..=2000 {
                if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(40) {
                    break;
                }
                std::fs::write(dir.join(".a.yaml.tmp"), service(&format!("v{i}"), "10.96.0.1")).unwrap();
                std::fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut served = vec!["v0".to_owned()];
    let deadline = Instant::now() + Duration::from_secs(30);
    while served.len() < 3 && Instant::now() < deadline {
        let now = get(metrics, "/state").and_then(|(_, body)| service_names(&body).pop());
        if let Some(name) = now.filter(|name| name != served.last().unwrap()) {
            assert!(!done.load(Ordering::SeqCst), "served {name} only after the writer stopped");
            served.push(name);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert_eq!(served.len(), 3, "the folder was not read while it kept changing: served {served:?}");
}

fn kproxy(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().unwrap()
}

/// Without `--manifests` or `--kubeconfig`, `state` asks the running
/// kproxy (at `--address`, or the configured metrics address) for what it
/// applied; `trace` and `render` refuse a dry run, which applies no rules.
#[test]
fn state_without_a_source_shows_the_running_kproxys_and_trace_refuses_a_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), service("alpha", "10.96.0.1")).unwrap();
    let (_running, _healthz, metrics) = dry_run(dir.path(), "100ms");
    eventually("the first sync", || get(metrics, "/state").is_some_and(|(_, body)| service_names(&body) == ["alpha"]));
    let address = format!("127.0.0.1:{metrics}");

    let out = kproxy(&["state", "--address", &address]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.lines().any(|l| l.starts_with("default/alpha ") && l.contains("10.96.0.1:80")), "{table}");

    // The address from the configuration's metricsBindAddress.
    let out = kproxy(&["state", "--metrics-bind-address", &address, "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(service_names(&String::from_utf8_lossy(&out.stdout)), ["alpha"]);

    for command in [&["trace", "--from", "10.0.0.1", "--to", "10.96.0.1:80"][..], &["render"][..]] {
        let out = kproxy(&[command, &["--address", &address]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
        assert!(stderr.contains("programs nothing (a dry run)"), "{command:?}: {stderr}");
        // Another mode's rules are never the answer.
        let out = kproxy(&[command, &["--address", &address, "--proxy-mode", "ipvs"]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{command:?}: {stderr}");
        assert!(stderr.contains(&format!("--proxy-mode ipvs: the kproxy on {address} runs dry-run")), "{stderr}");
    }
}

#[test]
fn a_command_without_a_source_says_when_no_kproxy_answers() {
    let address = format!("127.0.0.1:{}", free_port());
    let out = kproxy(&["trace", "--address", &address, "--from", "10.0.0.1", "--to", "10.96.0.1:80"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("no kproxy answers on {address}")), "{stderr}");
}
