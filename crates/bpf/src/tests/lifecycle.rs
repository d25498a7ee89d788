//! The loader's lifecycle: maps pinned and reused across a restart,
//! re-attaching without duplicates, cleanup removing everything, and the
//! errors naming what failed.

use std::os::fd::AsFd;
use std::path::Path;

use aya::programs::{SchedClassifier, TcAttachType};
use kproxy_ebpf::maps::{Config, Contents, Op, RangeKey, addr16, names};
use kproxy_sandbox::Netns;

use super::sock::Cleanup;
use super::support::{Bpffs, TCP, TestCgroup, fkey, kernel_available, service};
use crate::{BpfError, Datapath, Removed, sys};

/// `BPF_CGROUP_*` attach types of the eight socket hooks.
const SOCK_ATTACH_TYPES: [u32; 8] = [10, 11, 14, 15, 19, 20, 29, 30];

/// The programs each socket hook of `cgroup` runs.
fn cgroup_program_ids(cgroup: &Path) -> Vec<Vec<u32>> {
    let dir = std::fs::File::open(cgroup).expect("open the cgroup");
    SOCK_ATTACH_TYPES.iter().map(|t| sys::prog_query(dir.as_fd(), *t).expect("BPF_PROG_QUERY")).collect()
}

/// How many programs each socket hook of `cgroup` runs.
fn cgroup_programs(cgroup: &Path) -> Vec<usize> {
    cgroup_program_ids(cgroup).iter().map(Vec::len).collect()
}

fn tcx_programs(ns: &Netns, ifname: &str) -> (usize, usize) {
    ns.enter(|| {
        let count = |kind| SchedClassifier::query_tcx(ifname, kind).expect("query tcx").1.len();
        (count(TcAttachType::Ingress), count(TcAttachType::Egress))
    })
}

#[test]
fn load_refuses_a_pin_directory_outside_a_bpffs() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let err = Datapath::load(&dir.path().join("kproxy")).err().expect("not a bpffs");
    assert!(matches!(err, BpfError::NotBpffs(ref p) if p == dir.path()), "{err}");
}

#[test]
fn a_restart_reuses_the_pinned_maps_and_reattaching_leaves_one_program_per_hook() {
    if !kernel_available("restart") {
        return;
    }
    let ns = Netns::new("bpfre").expect("a netns");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).expect("a veth pair");
    let cgroup = TestCgroup::new();
    let bpffs = Bpffs::mount();
    let _cleanup = Cleanup(bpffs.pin_dir());
    let ops = service(("10.96.0.10", 80, TCP), 1, &[("10.244.1.10", 8080)], 1);
    let config = Config { node_netns_cookie: 7, masquerade_mark: 0x4000, reject_mark: 0x8000, flags: 1, pad: 0 };
    {
        let mut first = Datapath::load(&bpffs.pin_dir()).expect("first load");
        first.attach_cgroup(cgroup.path()).expect("attach");
        ns.enter(|| first.attach_tc("d0")).expect("attach tc");
        first.apply(&ops).expect("apply");
        first.write_config(config).expect("config");
    }
    // kproxy is gone: its pinned links keep the programs attached.
    let before = cgroup_program_ids(cgroup.path());
    assert_eq!(cgroup_programs(cgroup.path()), vec![1; 8]);
    assert_eq!(tcx_programs(&ns, "d0"), (1, 1));

    let (pinned, pinned_config) = crate::read_pinned(&bpffs.pin_dir()).expect("read the pins");
    assert_eq!((pinned.frontends.len(), pinned.backends.len(), pinned_config), (1, 1, config));
    let mut second = Datapath::load(&bpffs.pin_dir()).expect("second load");
    let mut want = Contents::default();
    for op in &ops {
        match op {
            Op::PutBackend(k, v) => drop(want.backends.insert(*k, *v)),
            Op::PutFrontend(k, v) => drop(want.frontends.insert(*k, *v)),
            _ => unreachable!("service() writes backends and frontends"),
        }
    }
    assert_eq!(second.dump().expect("dump"), want, "the maps survived the restart");
    assert_eq!(second.config().expect("config"), config);
    second.attach_cgroup(cgroup.path()).expect("re-attach");
    ns.enter(|| second.attach_tc("d0")).expect("re-attach tc");
    assert_eq!(second.tc_interfaces().expect("tc interfaces"), vec!["d0".to_owned()]);
    assert_eq!(cgroup_programs(cgroup.path()), vec![1; 8], "no duplicates");
    let after = cgroup_program_ids(cgroup.path());
    assert!(before.iter().zip(&after).all(|(b, a)| b != a), "the new programs replaced the old: {before:?} {after:?}");
    assert_eq!(tcx_programs(&ns, "d0"), (1, 1), "no duplicates on tc");

    ns.enter(|| second.detach_tc("d0")).expect("detach tc");
    assert_eq!(tcx_programs(&ns, "d0"), (0, 0), "detached");
    assert!(second.tc_interfaces().expect("tc interfaces").is_empty());

    // Another cgroup: the links move, the first cgroup keeps nothing.
    let other = TestCgroup::new();
    second.attach_cgroup(other.path()).expect("attach elsewhere");
    assert_eq!(cgroup_programs(cgroup.path()), vec![0; 8]);
    assert_eq!(cgroup_programs(other.path()), vec![1; 8]);
    drop(second);
    ns.enter(|| crate::cleanup(&bpffs.pin_dir())).expect("cleanup");
}

#[test]
fn cleanup_detaches_every_program_and_removes_every_pin_and_is_idempotent() {
    if !kernel_available("cleanup") {
        return;
    }
    let ns = Netns::new("bpfcl").expect("a netns");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).expect("a veth pair");
    let cgroup = TestCgroup::new();
    let bpffs = Bpffs::mount();
    let _cleanup = Cleanup(bpffs.pin_dir());
    let mut datapath = Datapath::load(&bpffs.pin_dir()).expect("load");
    datapath.attach_cgroup(cgroup.path()).expect("attach");
    ns.enter(|| datapath.attach_tc("d0")).expect("attach tc");
    drop(datapath);

    let removed = ns.enter(|| crate::cleanup(&bpffs.pin_dir())).expect("cleanup");
    assert_eq!(removed, Removed { links: 10, maps: 9, filters: 0 });
    assert_eq!(cgroup_programs(cgroup.path()), vec![0; 8]);
    assert_eq!(tcx_programs(&ns, "d0"), (0, 0));
    assert!(!bpffs.pin_dir().exists(), "the pin directory is gone");
    let again = ns.enter(|| crate::cleanup(&bpffs.pin_dir())).expect("second cleanup");
    assert_eq!(again, Removed::default());
}

#[test]
fn a_failed_op_names_its_map_and_index_and_earlier_ops_stay_written() {
    if !kernel_available("apply error") {
        return;
    }
    let bpffs = Bpffs::mount();
    let _cleanup = Cleanup(bpffs.pin_dir());
    let mut datapath = Datapath::load(&bpffs.pin_dir()).expect("load");
    let good = RangeKey { prefixlen: 32 + 96 + 24, id: 1u32.to_be(), addr: addr16("10.0.0.0".parse().expect("ip")) };
    // An LPM prefix longer than the key: the kernel says EINVAL.
    let bad = RangeKey { prefixlen: 32 + 128 + 1, ..good };
    let err = datapath.apply(&[Op::PutSourceRange(good), Op::PutSourceRange(bad)]).expect_err("a bad prefix");
    match err {
        BpfError::MapUpdate { map, index, ref source, .. } => {
            assert_eq!((map, index), (names::SOURCE_RANGES, 1));
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL));
        }
        other => panic!("{other}"),
    }
    let contents = datapath.dump().expect("dump");
    assert_eq!(contents.source_ranges.into_iter().collect::<Vec<_>>(), vec![good]);
    // Deleting what is not there succeeds.
    datapath.apply(&[Op::DeleteFrontend(fkey("10.96.0.99", 1, TCP)), Op::DeleteRr(42)]).expect("idempotent deletes");
}

/// kproxy's cls_bpf filters on `ifname`: `tc filter show` lines naming a program.
fn cls_bpf_filters(ns: &Netns, ifname: &str) -> usize {
    ["ingress", "egress"]
        .iter()
        .map(|dir| {
            let out = ns.exec("tc", &["filter", "show", "dev", ifname, dir]).expect("tc filter show");
            out.lines().filter(|l| l.contains("kp_tc_")).count()
        })
        .sum()
}

#[test]
fn without_tcx_the_tc_programs_are_cls_bpf_filters_replaced_on_reattach_and_removed_by_cleanup() {
    if !kernel_available("cls_bpf") {
        return;
    }
    let ns = Netns::new("bpfcls").expect("a netns");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).expect("a veth pair");
    let bpffs = Bpffs::mount();
    let _cleanup = Cleanup(bpffs.pin_dir());
    let mut datapath = Datapath::load(&bpffs.pin_dir()).expect("load");
    ns.enter(|| datapath.attach_tc_as("d0", false)).expect("attach as cls_bpf");
    assert_eq!(cls_bpf_filters(&ns, "d0"), 2);
    ns.enter(|| datapath.attach_tc_as("d0", false)).expect("re-attach");
    assert_eq!(cls_bpf_filters(&ns, "d0"), 2, "no duplicates");
    drop(datapath);
    assert_eq!(cls_bpf_filters(&ns, "d0"), 2, "the filters outlive the loader");
    let removed = ns.enter(|| crate::cleanup(&bpffs.pin_dir())).expect("cleanup");
    assert_eq!(removed.filters, 2);
    assert_eq!(cls_bpf_filters(&ns, "d0"), 0);
}
