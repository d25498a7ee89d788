//! A running kproxy's `/state` and `/list` against the offline commands:
//! `/state` is the document `kproxy state -o json` prints, and `kproxy
//! list` (table or `-o json`) says in its forwarding column what the rules
//! masquerade.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod running;

use running::{Running, get_ok as get};

fn kproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().expect("the binary runs")
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic").display().to_string()
}

/// The example plus a Service claiming web's cluster IP as an external IP.
fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(example()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let thief = "apiVersion: v1\nkind: Service\nmetadata: {name: thief}\n\
                 spec: {clusterIP: 10.96.0.99, externalIPs: [10.96.0.10], ports: [{name: http, port: 80}]}\n";
    std::fs::write(dir.path().join("thief.yaml"), thief).unwrap();
    dir
}

const FLAGS: [&str; 6] =
    ["--hostname-override", "node-a", "--proxy-mode", "nftables", "--cluster-cidr", "10.244.0.0/16"];

/// `kproxy run --dry-run` on `dir` (the nftables mode's semantics), until
/// its `/list` has rows: (process, metrics port).
fn dry_run(dir: &Path) -> (Running, u16) {
    let dir = dir.display().to_string();
    // --dry-run: never program the test host's own namespace.
    let (running, _, metrics) = running::start(&[&["--manifests", dir.as_str()][..], &FLAGS, &["--dry-run"]].concat());
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(metrics, "/list").is_none_or(|body| body == "[]") {
        assert!(Instant::now() < deadline, "no rows in /list");
        std::thread::sleep(Duration::from_millis(100));
    }
    (running, metrics)
}

#[test]
fn state_endpoint_serves_the_document_state_json_prints() {
    let dir = folder();
    let (_running, metrics) = dry_run(dir.path());
    let served: serde_json::Value = serde_json::from_str(&get(metrics, "/state").unwrap()).unwrap();
    let mut args = vec!["state", "--manifests", dir.path().to_str().unwrap(), "-o", "json"];
    args.extend(FLAGS);
    let out = kproxy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(served["mode"], "dry-run");
    assert_eq!(printed["mode"], "nftables");
    let lost = "default/thief:http/TCP: frontend 10.96.0.10:80 is already served by default/web:http/TCP; not served";
    assert_eq!(served["notProgrammed"], serde_json::json!([lost]));
    assert_eq!(served["ignored"].as_array().map(Vec::len), Some(2));
    let without_mode = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("mode");
        v
    };
    assert_eq!(without_mode(served), without_mode(printed));
}

#[test]
fn list_says_what_the_nftables_rules_masquerade_in_the_table_and_in_json() {
    let dir = folder();
    let (_running, metrics) = dry_run(dir.path());
    let address = format!("127.0.0.1:{metrics}");
    let out = kproxy(&["list", "--address", &address, "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let forward = |frontend: &str| -> Vec<String> {
        let row = rows.as_array().unwrap().iter().find(|r| r["frontend"] == frontend).expect(frontend);
        row["endpoints"].as_array().unwrap().iter().map(|e| e["forward"].as_str().unwrap().to_owned()).collect()
    };
    // web's cluster IP, endpoints 10.244.1.5 (here) and 10.244.2.7: pods
    // keep their address, a pod reaching itself does not.
    assert_eq!(forward("10.96.0.10:80"), ["MasqOut*", "MasqOut"]);
    // web-public's node port (externalTrafficPolicy: Cluster): always.
    assert_eq!(forward("192.168.1.10:30080"), ["Masq", "Masq"]);
    // shop's load-balancer IP (Local): the client's address is kept.
    assert_eq!(forward("198.51.100.20:443"), ["NoMasq*"]);
    let first = &rows[0];
    assert!(first.get("schedulerFlags").is_some() && first.get("onePacket").is_some(), "{first}");

    let out = kproxy(&["list", "--address", &address]);
    let table = String::from_utf8(out.stdout).unwrap();
    let web_here = table.lines().find(|l| l.starts_with("  -> 10.244.1.5:8080 ")).expect(&table);
    assert_eq!(web_here.split_whitespace().nth(2), Some("MasqOut*"), "{table}");
    assert!(table.contains("\nForward: Masq every client masqueraded;"), "{table}");
}
