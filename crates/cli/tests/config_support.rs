//! The startup warnings about settings, end to end: a setting the mode
//! applies is applied and not warned about; one it does not use is warned
//! about naming the mode (docs/configuration.md).

use std::path::Path;
use std::process::{Command, Output};

fn kproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kproxy")).args(args).env_remove("RUST_LOG").output().expect("the binary runs")
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic").display().to_string()
}

fn render(extra: &[&str]) -> (String, String) {
    let example = example();
    let mut args = vec!["render", "--manifests", &example, "--hostname-override", "node-a"];
    args.extend_from_slice(extra);
    let out = kproxy(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[test]
fn the_iptables_masquerade_bit_is_applied_in_iptables_mode_without_a_warning() {
    let (rules, stderr) = render(&["--proxy-mode", "iptables", "--iptables-masquerade-bit", "13"]);
    assert!(rules.contains("-m mark --mark 0x2000/0x2000"), "bit 13 marks with 0x2000:\n{rules}");
    assert!(!rules.contains("0x4000"), "no trace of the default bit:\n{rules}");
    assert!(!stderr.contains("has no effect"), "{stderr}");
}

#[test]
fn settings_the_mode_does_not_use_are_warned_about_naming_the_mode() {
    let (rules, stderr) =
        render(&["--proxy-mode", "nftables", "--ipvs-scheduler", "lc", "--iptables-masquerade-bit", "13"]);
    for warning in [
        "--iptables-masquerade-bit: no effect in nftables mode (used by the iptables, ipvs and ebpf modes)",
        "--ipvs-scheduler: no effect in nftables mode (used by the ipvs and userspace modes)",
    ] {
        assert!(stderr.contains(warning), "{warning} missing:\n{stderr}");
    }
    assert!(rules.contains("0x4000") && !rules.contains("0x2000"), "nftables keeps its own bit:\n{rules}");
}

#[test]
fn with_no_mode_configured_the_nftables_settings_apply() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = dir.path().join("config.yaml");
    let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                nftables: {masqueradeBit: 13}\nipvs: {strictARP: true}\n";
    std::fs::write(&config, text).expect("writable");
    let (rules, stderr) = render(&["--config", config.to_str().expect("a UTF-8 path")]);
    assert!(rules.contains("0x2000") && !rules.contains("0x4000"), "nftables.masqueradeBit applies:\n{rules}");
    assert!(stderr.contains("ipvs.strictARP: no effect in nftables mode (used by the ipvs mode)"), "{stderr}");
}
