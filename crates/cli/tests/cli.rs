//! The `kproxy` binary end to end: exit codes, messages, outputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().expect("the binary runs")
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic").display().to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const CONFIG_HEAD: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

#[test]
fn state_prints_one_row_per_frontend_of_the_example() {
    let out = kproxy(&["state", "--manifests", &example(), "--hostname-override", "node-a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.starts_with("node node-a (zone zone-1); node ports on 192.168.1.10;"), "{table}");
    let web_public: Vec<&str> = table.lines().filter(|l| l.starts_with("default/web-public ")).collect();
    assert_eq!(web_public.len(), 2, "{table}");
    assert!(web_public[1].contains("192.168.1.10:30080  NodePort"), "{table}");
}

#[test]
fn state_json_is_the_proxy_state_with_the_mode() {
    let out = kproxy(&["state", "--manifests", &example(), "--hostname-override", "node-a", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(json["node"]["name"], "node-a");
    assert_eq!(json["mode"], "nftables");
    let ports = json["ipv4"]["servicePorts"].as_array().unwrap();
    let dns =
        ports.iter().find(|p| p["name"]["service"]["name"] == "kube-dns" && p["name"]["protocol"] == "UDP").unwrap();
    assert_eq!(dns["clusterEndpoints"][0]["ip"], "10.244.2.53");
    assert_eq!(dns["frontends"][0]["kind"], "ClusterIP");
}

#[test]
fn a_malformed_document_is_reported_and_everything_else_still_served() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "good.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: good}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n",
    );
    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: 10.96.0.2, ports: [{port: 99999}]}\n",
    );
    let out = kproxy(&["state", "--manifests", &dir.path().display().to_string(), "--hostname-override", "n"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("default/good  80/TCP  10.96.0.1:80"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("default/bad"));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}: document 1 (line 1): Service default/bad: spec.ports[0].port: 99999 is out of range (allowed: 1-65535)\n\
             1 document(s) skipped\n",
            bad.display()
        )
    );
}

/// A bad or unsupported `kproxy.io/*` annotation is no invalid document:
/// the Service is listed, served with the default, and the warning is
/// judged by the mode `run` would use.
#[test]
fn state_lists_annotations_not_honoured_under_the_mode_given() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: least, annotations: {kproxy.io/scheduler: lc}}\n\
         spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: bogus, annotations: {kproxy.io/scheduler: bogus}}\n\
         spec: {clusterIP: 10.96.0.2, ports: [{port: 80}]}\n",
    );
    let folder = dir.path().display().to_string();
    let state =
        |mode: &str| kproxy(&["state", "--manifests", &folder, "--hostname-override", "n", "--proxy-mode", mode]);
    let out = state("iptables");
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("default/least  80/TCP  10.96.0.1:80") && table.contains("default/bogus  80/TCP"),
        "{table}"
    );
    let warnings: Vec<&str> =
        table.lines().skip_while(|l| !l.starts_with("annotations not honoured")).skip(1).collect();
    assert_eq!(
        warnings,
        [
            "  default/bogus: kproxy.io/scheduler: unsupported value \"bogus\" (allowed: random, rr, wrr, lc, wlc, sed, nq, sh, dh, mh, fo, ovf, lblc, lblcr, twos); using random",
            "  default/least: kproxy.io/scheduler: scheduler lc is not supported in iptables mode (supported: random); using random",
        ],
        "{table}"
    );
    // The userspace mode does lc: only the unknown name is left.
    let table = stdout(&state("userspace"));
    assert!(!table.contains("default/least:") && table.contains("default/bogus: kproxy.io/scheduler"), "{table}");
    assert!(table.contains("; using rr"), "the userspace default: {table}");
}

#[test]
fn a_bad_config_file_exits_64_naming_the_field_and_the_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "c.yaml", &format!("{CONFIG_HEAD}iptables:\n  masqueradeBitt: 3\n"));
    let out = kproxy(&["state", "--manifests", &example(), "--config", &config.display().to_string()]);
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(
        stderr(&out),
        format!(
            "kproxy: --config {}: iptables.masqueradeBitt: unknown field (allowed: masqueradeBit, masqueradeAll, \
             localhostNodePorts, syncPeriod, minSyncPeriod)\n",
            config.display()
        )
    );
    let config = write(dir.path(), "d.yaml", &format!("{CONFIG_HEAD}detectLocalMode: Magic\n"));
    let out = kproxy(&["run", "--manifests", &example(), "--config", &config.display().to_string(), "--dry-run"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr(&out).ends_with(
            "detectLocalMode: unsupported value \"Magic\" (allowed: ClusterCIDR, NodeCIDR, BridgeInterface, \
             InterfaceNamePrefix, or empty for ClusterCIDR)\n"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_flag_value_exits_64_naming_the_flag() {
    let out = kproxy(&["run", "--manifests", &example(), "--iptables-masquerade-bit", "40", "--dry-run"]);
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(stderr(&out), "kproxy: --iptables-masquerade-bit: 40 is out of range (allowed: 0-31)\n");
    let out = kproxy(&["run", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn run_outside_a_cluster_without_a_source_says_what_to_pass() {
    let out = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["run", "--dry-run"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr(&out).contains("not running in a Kubernetes pod")
            && stderr(&out).contains("pass --kubeconfig FILE, or --manifests DIR to run standalone"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn run_once_in_dry_run_syncs_the_example_and_exits_zero() {
    let out =
        kproxy(&["run", "--manifests", &example(), "--hostname-override", "node-a", "--dry-run", "--once", "--v", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(log.contains("would serve 7 service ports on 11 frontends (2 node ports) over 11 endpoints"), "{log}");
}

#[test]
fn a_missing_manifest_folder_is_a_usage_error() {
    let out = kproxy(&["run", "--manifests", "/nonexistent/kproxy", "--once", "--dry-run"]);
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(stderr(&out), "kproxy: --manifests /nonexistent/kproxy: not a directory\n");
}

#[test]
fn logging_format_json_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "c.yaml", &format!("{CONFIG_HEAD}logging:\n  format: json\n"));
    let out =
        kproxy(&["run", "--manifests", &example(), "--config", &config.display().to_string(), "--once", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(log.lines().count() >= 2, "{log}");
    for line in log.lines() {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        // Kubernetes' structured logging: milliseconds since the epoch,
        // the message, klog's verbosity, the fields at the top.
        assert!(entry["ts"].as_f64().is_some_and(|ts| ts > 1.7e12), "{line}");
        assert!(entry["msg"].as_str().is_some_and(|m| !m.is_empty()), "{line}");
        assert!(entry["v"].is_u64(), "{line}");
        assert!(entry.get("level").is_none() && entry.get("fields").is_none(), "{line}");
    }
    let starting = log.lines().find(|l| l.contains("\"starting")).unwrap_or_else(|| panic!("{log}"));
    let entry: serde_json::Value = serde_json::from_str(starting).unwrap();
    assert!(entry["node"].is_string(), "{starting}");
    assert_eq!((&entry["mode"], &entry["v"]), (&"dry-run".into(), &0.into()), "{starting}");
}

#[test]
fn logging_format_flag_selects_json_and_text_stays_tracings_format() {
    let args = ["run", "--manifests", &example(), "--hostname-override", "node-a", "--once", "--dry-run"];
    let json = kproxy(&[&args[..], &["--logging-format", "json"]].concat());
    assert!(json.status.success(), "{}", stderr(&json));
    for line in stderr(&json).lines() {
        assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "{line}");
    }
    let text = kproxy(&args);
    let log = stderr(&text);
    let starting = log.lines().find(|l| l.contains("starting")).unwrap_or_else(|| panic!("{log}"));
    // `2026-12-02T07:13:13.551289Z  INFO kproxy::run: starting node=node-a ...`
    assert!(starting.contains("  INFO kproxy::run: starting node=node-a mode=\"dry-run\""), "{starting}");
    assert!(starting.starts_with(|c: char| c.is_ascii_digit()), "{starting}");
}

#[test]
fn render_in_iptables_mode_prints_restore_payloads_in_upstreams_layout() {
    let out =
        kproxy(&["render", "--manifests", &example(), "--hostname-override", "node-a", "--proxy-mode", "iptables"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("# IPv4: iptables-restore --noflush\n*filter\n"), "{text}");
    for needle in
        ["*nat\n", ":KUBE-SERVICES - [0:0]", "-j KUBE-SVC-", "--random-fully", "# IPv6: ip6tables-restore --noflush"]
    {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    assert_eq!(text.matches("COMMIT\n").count(), 4, "filter and nat, per family");
    // Jump rules as runnable arguments: a comment of several words quoted.
    let jump = "# -t nat -I PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n";
    assert!(text.contains(jump), "{jump} missing:\n{text}");
}

#[test]
fn trace_in_iptables_mode_walks_the_restore_payload_to_the_same_verdicts_as_nftables_mode() {
    let trace = |mode: &str, from: &str, to: &str, iif: &str| {
        let out = kproxy(&[
            "trace",
            "--manifests",
            &example(),
            "--hostname-override",
            "node-a",
            "--proxy-mode",
            mode,
            "--from",
            from,
            "--to",
            to,
            "--iif",
            iif,
        ]);
        assert!(out.status.success(), "{mode} {from} -> {to}: {}", stderr(&out));
        stdout(&out)
    };
    let cases = [
        ("192.168.1.200", "192.168.1.10:30080", "eth0"),
        ("10.244.1.99", "10.96.0.10:80", "cni0"),
        ("192.168.1.200", "10.96.0.53:53/udp", "eth0"),
        ("192.168.1.200", "198.51.100.20:443", "eth0"),
        ("192.168.1.200", "10.96.0.30:80", "eth0"),
    ];
    for (from, to, iif) in cases {
        let ipt = trace("iptables", from, to, iif);
        let nft = trace("nftables", from, to, iif);
        let verdict = |text: &str| text.split("rules\n").next().unwrap_or_default().to_owned();
        assert_eq!(verdict(&ipt), verdict(&nft), "{from} -> {to}\niptables:\n{ipt}\nnftables:\n{nft}");
        assert!(ipt.contains("\nrules\n  nat: -A PREROUTING "), "{ipt}");
    }
    let ipt = trace("iptables", "192.168.1.200", "192.168.1.10:30080", "eth0");
    for needle in ["-j KUBE-NODEPORTS", "-j DNAT --to-destination", "-j MASQUERADE --random-fully"] {
        assert!(ipt.contains(needle), "{needle} missing:\n{ipt}");
    }
}

#[test]
fn render_in_ipvs_mode_prints_virtual_servers_and_the_companion_table() {
    let out = kproxy(&["render", "--manifests", &example(), "--hostname-override", "node-a", "--proxy-mode", "ipvs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "# IPVS virtual servers (ipvsadm -R)\n-A -t 10.96.0.10:80 -s rr -p 10800\n",
        "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1\n",
        "-A -u 10.96.0.53:53 -s rr\n",
        "# kube-ipvs0: 10.96.0.10/32\n",
        "add table ip kproxy-ipvs",
        "add chain ip kproxy-ipvs filter-input",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    assert!(!text.contains("table ip kproxy "), "no nftables-mode table:\n{text}");
}

#[test]
fn trace_in_ipvs_mode_goes_through_the_companion_table_and_a_virtual_server() {
    let out = kproxy(&[
        "trace",
        "--manifests",
        &example(),
        "--hostname-override",
        "node-a",
        "--proxy-mode",
        "ipvs",
        "--from",
        "192.168.1.200",
        "--to",
        "192.168.1.10:30080",
        "--iif",
        "eth0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("verdict   DNAT to one of 2 endpoints, picked by IPVS's rr scheduler\n"), "{text}");
    assert!(text.contains("  ipvs: TCP 192.168.1.10:30080 scheduler rr -> "), "{text}");
    assert!(text.contains("nat-postrouting: "), "{text}");
}

#[test]
fn trace_and_render_refuse_the_userspace_mode_instead_of_answering_for_another() {
    for command in [&["trace", "--from", "192.168.1.200", "--to", "10.96.0.10:80"][..], &["render"][..]] {
        let out = kproxy(&[command, &["--manifests", &example(), "--proxy-mode", "userspace"]].concat());
        assert_eq!(out.status.code(), Some(64), "{command:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("the userspace mode proxies through kproxy's own sockets"), "{}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
}
