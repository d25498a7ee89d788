use super::*;

#[test]
fn children_follow_table_order_and_shapes() {
    let iptables: Vec<_> = children("iptables").into_iter().map(|(k, _)| k).collect();
    assert_eq!(iptables, ["masqueradeBit", "masqueradeAll", "localhostNodePorts", "syncPeriod", "minSyncPeriod"]);
    let logging = children("logging");
    assert!(logging.contains(&("vmodule", Shape::ObjectList)));
    assert!(logging.contains(&("options", Shape::Object)));
    assert!(logging.contains(&("format", Shape::Leaf)));
    let vmodule: Vec<_> = children("logging.vmodule[]").into_iter().map(|(k, _)| k).collect();
    assert_eq!(vmodule, ["filePattern", "verbosity"]);
    assert_eq!(children("mode"), []);
}

fn texts(present: &[&str], flags: &[&str], mode: Option<ProxyMode>) -> Vec<String> {
    let present: Vec<String> = present.iter().map(|p| (*p).to_owned()).collect();
    warnings(&present, flags, mode).iter().map(ToString::to_string).collect()
}

#[test]
fn settings_the_running_mode_applies_do_not_warn() {
    let present = ["mode", "ipvs.scheduler", "ipvs.tcpTimeout", "iptables.masqueradeBit", "clusterCIDR"];
    let flags = ["--proxy-mode", "--ipvs-strict-arp", "--ipvs-exclude-cidrs", "--iptables-masquerade-bit"];
    assert_eq!(texts(&present, &flags, Some(ProxyMode::Ipvs)), Vec::<String>::new());
    assert_eq!(texts(&["iptables.localhostNodePorts"], &["--masquerade-all"], Some(Iptables)), Vec::<String>::new());
}

#[test]
fn a_setting_another_mode_applies_warns_naming_the_running_mode() {
    let present = ["ipvs.scheduler", "iptables.masqueradeBit", "nftables.masqueradeBit"];
    assert_eq!(
        texts(&present, &["--ipvs-strict-arp"], Some(Nftables)),
        [
            "iptables.masqueradeBit: no effect in nftables mode (used by the iptables, ipvs and ebpf modes)",
            "ipvs.scheduler: no effect in nftables mode (used by the ipvs and userspace modes)",
            "--ipvs-strict-arp: no effect in nftables mode (used by the ipvs mode)",
        ]
    );
    assert_eq!(
        texts(&["detectLocalMode"], &["--conntrack-min"], Some(Userspace)),
        [
            "detectLocalMode: no effect in userspace mode (used by the nftables, iptables, ipvs and ebpf modes)",
            "--conntrack-min: no effect in userspace mode (used by the nftables, iptables, ipvs and ebpf modes)",
        ]
    );
}

#[test]
fn without_a_mode_only_what_no_mode_acts_on_warns() {
    let present = ["configSyncPeriod".to_owned(), "winkernel.sourceVip".to_owned(), "ipvs.scheduler".to_owned()];
    let texts: Vec<String> = warnings(&present, &["--proxy-mode", "--feature-gates", "--profiling"], None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        texts,
        [
            "--feature-gates: kproxy has no feature gates; ignored",
            "--profiling: not implemented yet; ignored",
            "winkernel.sourceVip: Windows only; ignored",
            "configSyncPeriod: kproxy's API watches stream every change and never resync; ignored",
        ]
    );
}

#[test]
fn every_path_and_flag_is_listed_once() {
    let mut names: Vec<&str> = FIELDS.iter().flat_map(|f| f.path.into_iter().chain(f.flag)).collect();
    let total = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), total);
}

#[test]
fn every_mode_row_names_a_mode_and_the_docs_table_has_a_row_per_setting() {
    for f in FIELDS {
        if let Modes(modes) = f.support {
            assert!(!modes.is_empty(), "{}: Modes(&[]) is Ignored or NotYet", f.name());
        }
    }
    let table = markdown();
    assert_eq!(table.lines().count(), FIELDS.len() + 2);
    assert!(table.contains("| `ipvs.scheduler` | `--ipvs-scheduler` | no | no | yes | yes |"), "{table}");
}
