//! A sync the kernel refuses, on the real kernel: the log and the metrics
//! carry the kernel's errno and the object it refused, and kproxy recovers
//! once the obstacle is gone.

mod lab;

use std::io::Write;
use std::process::{Command, Stdio};

use lab::*;

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// The value of the sample `line` starts (name and labels), or 0.
fn sample(metrics: &str, line: &str) -> f64 {
    metrics.lines().find_map(|l| l.strip_prefix(line)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
}

#[test]
fn a_table_another_process_owns_fails_the_sync_with_eperm_naming_the_table() {
    let mut lab = Lab::new(&[(1, "web-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    // `nft -i` keeps its netlink socket open: the table is its own
    // (`flags owner`) until it exits, and the kernel refuses any other
    // process's change to it with EPERM.
    let mut nft = Command::new("nft");
    nft.arg("-i").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut holder = lab.node().spawn(nft).expect("nft -i in node-a");
    let stdin = holder.stdin.as_mut().expect("stdin was piped");
    stdin.write_all(b"add table ip kproxy { flags owner; }\n").expect("writing to nft");
    stdin.flush().expect("writing to nft");
    lab.eventually("the owned table", || lab.ruleset().contains("flags owner"));

    lab.start(&[]);
    let failed = r#"kproxy_sync_proxy_rules_failures_total{mode="nftables",reason="EPERM"}"#;
    lab.eventually("a failed sync counted with its errno", || sample(&lab.metrics(), failed) >= 1.0);
    let metrics = lab.metrics();
    let upstream = r#"kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"}"#;
    assert!(sample(&metrics, upstream) >= 1.0, "{metrics}");

    let log = lab.log();
    let line = log.lines().find(|l| l.contains("sync failed")).unwrap_or_else(|| panic!("no failure logged:\n{log}"));
    for needle in ["reason=EPERM", "Operation not permitted", "object=\"add table ip kproxy"] {
        assert!(line.contains(needle), "{needle} missing from {line}");
    }

    let healthz = lab.node().enter(|| {
        use std::io::Read;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", 10256)).expect("healthz listens");
        stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").expect("asking /healthz");
        let mut body = String::new();
        let _ = stream.read_to_string(&mut body);
        body
    });
    assert!(
        healthz.contains(r#""lastSyncError":"the kernel refused the transaction at `add table ip kproxy"#),
        "{healthz}"
    );

    // The owner gone, the retry programs kproxy's rules.
    holder.terminate().expect("stopping nft");
    let _ = holder.wait_with_timeout(std::time::Duration::from_secs(5));
    lab.eventually("kproxy's rules after the retry", || lab.ruleset().contains("service-ips"));
    assert!(lab.synced(), "{}", lab.log_tail());
}
