//! The conntrack rules against a fake `/proc/sys` and `/sys` in a
//! temporary folder: the host's global settings are never touched.

use std::os::unix::fs::PermissionsExt;

use super::*;

const NETFILTER: &str = "proc/sys/net/netfilter";

/// A fake root with a loaded `nf_conntrack`: limit, hash size, the
/// kernel's default timeouts, and a writable sysfs.
fn loaded(max: u64, hashsize: u64) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("a temporary folder");
    let files = [
        (format!("{NETFILTER}/nf_conntrack_max"), max.to_string()),
        (format!("{NETFILTER}/nf_conntrack_tcp_timeout_established"), "432000".into()),
        (format!("{NETFILTER}/nf_conntrack_tcp_timeout_close_wait"), "60".into()),
        (format!("{NETFILTER}/nf_conntrack_udp_timeout"), "30".into()),
        (format!("{NETFILTER}/nf_conntrack_udp_timeout_stream"), "120".into()),
        (format!("{NETFILTER}/nf_conntrack_tcp_be_liberal"), "0".into()),
        (format!("sys/{HASHSIZE}"), hashsize.to_string()),
        ("proc/self/mounts".into(), "sysfs /sys sysfs rw,nosuid,nodev 0 0\n".into()),
    ];
    for (rel, text) in files {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("folders");
        std::fs::write(path, format!("{text}\n")).expect("a file");
    }
    root
}

fn read(root: &tempfile::TempDir, rel: &str) -> String {
    std::fs::read_to_string(root.path().join(rel)).expect("a file").trim().to_owned()
}

/// kube-proxy's defaults: 32768 per core, at least 131072, established
/// TCP 24 h, CLOSE_WAIT 1 h, the UDP timeouts and be_liberal left alone.
fn defaults() -> ConntrackSettings {
    ConntrackSettings {
        max_per_core: 32 * 1024,
        min: 128 * 1024,
        tcp_established_timeout: Duration::from_secs(24 * 3600),
        tcp_close_wait_timeout: Duration::from_secs(3600),
        ..ConntrackSettings::default()
    }
}

fn set(setting: &str, from: u64, to: u64) -> Outcome {
    Outcome::Set { setting: setting.into(), from: Some(from), to }
}

fn kept(setting: &str, value: u64) -> Outcome {
    Outcome::Kept { setting: setting.into(), value }
}

fn skipped(setting: &str, wanted: u64, reason: Skip) -> Outcome {
    Outcome::Skipped { setting: setting.into(), wanted, reason }
}

const MAX_NAME: &str = "net.netfilter.nf_conntrack_max";
const HASHSIZE_NAME: &str = "/sys/module/nf_conntrack/parameters/hashsize";

#[test]
fn the_limit_is_per_core_times_cpus_with_min_as_floor_and_none_without_per_core() {
    let s = |max_per_core, min| ConntrackSettings { max_per_core, min, ..ConntrackSettings::default() };
    assert_eq!(conntrack_max(&s(32768, 131072), 8), Some(262144));
    assert_eq!(conntrack_max(&s(32768, 131072), 2), Some(131072));
    assert_eq!(conntrack_max(&s(10, 0), 3), Some(30));
    assert_eq!(conntrack_max(&s(0, 131072), 64), None);
}

#[test]
fn defaults_raise_the_limit_and_hash_size_and_set_both_tcp_timeouts() {
    let root = loaded(65536, 16384);
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    assert_eq!(
        out,
        [
            set(MAX_NAME, 65536, 262144),
            set(HASHSIZE_NAME, 16384, 65536),
            set("net.netfilter.nf_conntrack_tcp_timeout_established", 432000, 86400),
            set("net.netfilter.nf_conntrack_tcp_timeout_close_wait", 60, 3600),
        ]
    );
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_max")), "262144");
    assert_eq!(read(&root, &format!("sys/{HASHSIZE}")), "65536");
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_tcp_timeout_established")), "86400");
    // Zero and false leave the kernel's values.
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_udp_timeout")), "30");
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_tcp_be_liberal")), "0");
}

#[test]
fn a_higher_limit_is_never_lowered_but_a_small_hash_size_is_raised() {
    let root = loaded(1_048_576, 16384);
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    assert_eq!(out[..2], [kept(MAX_NAME, 1_048_576), set(HASHSIZE_NAME, 16384, 65536)]);
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_max")), "1048576");
}

#[test]
fn timeouts_are_written_in_whole_seconds_only_when_different_and_may_go_down() {
    let root = loaded(262144, 65536);
    let settings = ConntrackSettings {
        tcp_established_timeout: Duration::from_secs(7200),
        tcp_close_wait_timeout: Duration::from_millis(60_900),
        tcp_be_liberal: true,
        udp_timeout: Duration::from_secs(45),
        udp_stream_timeout: Duration::from_secs(150),
        ..ConntrackSettings::default()
    };
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &settings, 8);
    assert_eq!(
        out,
        [
            set("net.netfilter.nf_conntrack_tcp_timeout_established", 432000, 7200),
            kept("net.netfilter.nf_conntrack_tcp_timeout_close_wait", 60),
            set("net.netfilter.nf_conntrack_tcp_be_liberal", 0, 1),
            set("net.netfilter.nf_conntrack_udp_timeout", 30, 45),
            set("net.netfilter.nf_conntrack_udp_timeout_stream", 120, 150),
        ]
    );
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_udp_timeout_stream")), "150");
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_tcp_be_liberal")), "1");
}

#[test]
fn a_sub_second_timeout_is_skipped_instead_of_written_as_zero() {
    let root = loaded(262144, 65536);
    let settings = ConntrackSettings { udp_timeout: Duration::from_millis(500), ..ConntrackSettings::default() };
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &settings, 8);
    assert_eq!(out, [skipped("net.netfilter.nf_conntrack_udp_timeout", 0, Skip::UnderOneSecond)]);
    assert_eq!(read(&root, &format!("{NETFILTER}/nf_conntrack_udp_timeout")), "30");
}

#[test]
fn outside_the_initial_namespace_the_limit_and_hash_size_are_skipped_and_the_timeouts_applied() {
    let root = loaded(65536, 16384);
    // How the kernel shows the global limit in another network namespace.
    let max = root.path().join(NETFILTER).join("nf_conntrack_max");
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    assert_eq!(
        out,
        [
            skipped(MAX_NAME, 262144, Skip::NotInitialNamespace),
            skipped(HASHSIZE_NAME, 65536, Skip::NotInitialNamespace),
            set("net.netfilter.nf_conntrack_tcp_timeout_established", 432000, 86400),
            set("net.netfilter.nf_conntrack_tcp_timeout_close_wait", 60, 3600),
        ]
    );
    assert_eq!(read(&root, &format!("sys/{HASHSIZE}")), "16384");
}

#[test]
fn outside_the_initial_namespace_a_large_enough_limit_needs_no_warning() {
    let root = loaded(1_048_576, 262144);
    let max = root.path().join(NETFILTER).join("nf_conntrack_max");
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    assert_eq!(out[..2], [kept(MAX_NAME, 1_048_576), kept(HASHSIZE_NAME, 262144)]);
}

#[test]
fn a_read_only_sysfs_skips_the_hash_size_with_upstreams_warning() {
    let root = loaded(65536, 16384);
    std::fs::write(root.path().join("proc/self/mounts"), "sysfs /sys sysfs ro,nosuid 0 0\n").expect("mounts");
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    assert_eq!(out[..2], [set(MAX_NAME, 65536, 262144), skipped(HASHSIZE_NAME, 65536, Skip::SysfsReadOnly)]);
    assert_eq!(read(&root, &format!("sys/{HASHSIZE}")), "16384");
    assert!(Skip::SysfsReadOnly.to_string().starts_with("/sys is mounted read-only"));
}

#[test]
fn without_nf_conntrack_every_setting_is_skipped_as_not_loaded() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let settings = ConntrackSettings { udp_timeout: Duration::from_secs(45), ..defaults() };
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &settings, 8);
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|o| matches!(o, Outcome::Skipped { reason: Skip::NotLoaded, .. })), "{out:?}");
    assert!(!root.path().join("proc").exists(), "nothing was created");
}

#[test]
fn write_errors_name_the_mount_or_the_namespace() {
    let error = |errno| SysctlError::Write {
        path: "/proc/sys/net/netfilter/nf_conntrack_udp_timeout".into(),
        value: "45".into(),
        source: std::io::Error::from_raw_os_error(errno),
    };
    assert_eq!(skip(&error(libc::EROFS), Skip::ProcSysReadOnly), Skip::ProcSysReadOnly);
    assert_eq!(skip(&error(libc::EROFS), Skip::SysfsReadOnly), Skip::SysfsReadOnly);
    assert_eq!(skip(&error(libc::EOPNOTSUPP), Skip::SysfsReadOnly), Skip::NotInitialNamespace);
    assert_eq!(skip(&error(libc::ENOENT), Skip::ProcSysReadOnly), Skip::NotLoaded);
    let Skip::Failed(text) = skip(&error(libc::EPERM), Skip::ProcSysReadOnly) else { panic!("EPERM is a failure") };
    assert!(text.contains("nf_conntrack_udp_timeout") && text.contains("not permitted"), "{text}");
}

#[test]
fn a_limit_that_cannot_be_raised_leaves_the_hash_size() {
    let root = loaded(65536, 16384);
    // A directory in place of the sysctl: the write fails (EISDIR), as on a
    // read-only /proc/sys, without needing a read-only mount.
    let max = root.path().join(NETFILTER).join("nf_conntrack_max");
    std::fs::remove_file(&max).expect("rm");
    std::fs::create_dir(&max).expect("mkdir");
    let out = apply_conntrack_settings(&KernelFiles::under(root.path()), &defaults(), 8);
    let Outcome::Skipped { setting, wanted: 262144, reason: Skip::Failed(_) } = &out[0] else { panic!("{out:?}") };
    assert_eq!(setting, MAX_NAME);
    assert!(matches!(&out[1], Outcome::Set { setting, .. } if setting.ends_with("tcp_timeout_established")), "{out:?}");
    assert_eq!(read(&root, &format!("sys/{HASHSIZE}")), "16384");
}
