//! `kproxy state`: the table and `-o json` carry the same lists (ignored
//! Services, what the mode does not program, annotations not honoured),
//! computed by each mode's own planner.

use std::path::Path;
use std::process::{Command, Output};

fn kproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().expect("the binary runs")
}

/// `web` holds 10.96.0.10:80 as its cluster IP; `thief` claims it as an
/// external IP; `signal` is SCTP; `db` is headless.
const SERVICES: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: thief}
spec: {clusterIP: 10.96.0.20, externalIPs: [10.96.0.10], ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: signal}
spec: {clusterIP: 10.96.0.30, ports: [{name: sig, port: 9000, protocol: SCTP}]}
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {clusterIP: None, ports: [{port: 5432}]}
";

fn state(dir: &Path, mode: &str, json: bool) -> String {
    let dir = dir.display().to_string();
    let mut args = vec!["state", "--manifests", &dir, "--hostname-override", "node-a", "--proxy-mode", mode];
    if json {
        args.extend(["-o", "json"]);
    }
    let out = kproxy(&args);
    assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn every_mode_reports_the_frontend_lost_to_another_claim_in_the_table_and_in_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("services.yaml"), SERVICES).unwrap();
    let lost = "default/thief:http/TCP: frontend 10.96.0.10:80 is already served by default/web:http/TCP; not served";
    let sctp = "default/signal:sig/SCTP: SCTP is not served in userspace mode";
    let ipvs_lost = "default/thief:http/TCP (IPv4): ExternalIP frontend TCP 10.96.0.10:80 is already served by \
                     default/web:http/TCP (ClusterIP)";
    let cases: [(&str, &[&str]); 4] =
        [("nftables", &[lost]), ("iptables", &[lost]), ("ipvs", &[ipvs_lost]), ("userspace", &[sctp, lost])];
    for (mode, expected) in cases {
        let json: serde_json::Value = serde_json::from_str(&state(dir.path(), mode, true)).expect("JSON");
        assert_eq!(json["mode"], mode);
        assert_eq!(json["notProgrammed"], serde_json::json!(expected), "{mode}");
        assert_eq!(json["ignored"][0]["reason"], "headless (clusterIP: None)", "{mode}");

        let table = state(dir.path(), mode, false);
        let (_, section) = table.split_once(&format!("\nnot programmed in {mode} mode:\n")).expect(&table);
        let listed: Vec<&str> = section.lines().take_while(|l| !l.is_empty()).map(str::trim).collect();
        assert_eq!(listed, expected, "{mode}:\n{table}");
        assert!(table.contains("\nignored:\n  default/db: headless (clusterIP: None)\n"), "{table}");
        let thief = table.lines().find(|l| l.starts_with("default/thief") && l.contains("ExternalIP")).expect(&table);
        assert!(thief.ends_with("not served: held by default/web:http/TCP (below)"), "{mode}:\n{table}");
    }
}

#[test]
fn json_spells_frontend_kinds_as_the_table_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("services.yaml"), SERVICES).unwrap();
    let json: serde_json::Value = serde_json::from_str(&state(dir.path(), "nftables", true)).unwrap();
    let table = state(dir.path(), "nftables", false);
    let mut kinds: Vec<String> = json["ipv4"]["servicePorts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["frontends"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_owned()))
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds, ["ClusterIP", "ExternalIP"]);
    for kind in kinds {
        assert!(table.contains(&format!("  {kind}  ")), "{kind} not in\n{table}");
    }
}
