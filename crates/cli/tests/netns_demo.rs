//! `kproxy demo` end to end: the sandbox, kproxy in it, traffic, the
//! table, and nothing left behind.

use std::path::Path;
use std::process::Command;

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo").display().to_string()
}

fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn the_demo_serves_every_service_and_cleans_up() {
    let child = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["demo", "--manifests", &example()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let row = |service: &str, frontend: &str| -> String {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{service} ")) && l.contains(frontend))
            .unwrap_or_else(|| panic!("no row for {service} {frontend}:\n{stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        row("default/web", "ClusterIP").contains("web-1") && row("default/web", "ClusterIP").contains("web-3"),
        "{stdout}"
    );
    assert!(row("default/nobody", "ClusterIP").contains("refused 60"), "{stdout}");
    assert!(
        row("default/shop", "LoadBalancerIP").contains("shop-a 60 no"),
        "local policy: local pod, client kept:\n{stdout}"
    );
    assert!(
        row("default/web-public", "NodePort").contains(" yes "),
        "cluster policy from outside is masqueraded:\n{stdout}"
    );
    assert!(row("default/turns", "ClusterIP").contains("web-1 20, web-2 20, web-3 20"), "round robin:\n{stdout}");
    assert!(row("default/dns", "UDP").contains("dns-1 60"), "{stdout}");
    // Other tests run in parallel: look only at the demo's own (named with its pid).
    let left: Vec<String> = namespaces().into_iter().filter(|n| n.contains(&format!("-{pid}-"))).collect();
    assert!(left.is_empty(), "the demo left namespaces behind: {left:?}");
}

#[test]
fn without_root_the_demo_says_what_it_needs() {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_kproxy"), "demo"])
        .output()
        .expect("setpriv (util-linux) runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("kproxy demo needs root: it builds network namespaces"), "{stderr}");
}
