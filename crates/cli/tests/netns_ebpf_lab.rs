//! The lab's side of the ebpf mode, checked without kproxy: what goes in
//! the cgroup kproxy's socket programs will apply to (node-a and its pods:
//! their probes and their backends' sockets), what stays out (the outside
//! client, node-b and its pods), the flags kproxy gets, and that nothing
//! is left once the lab drops.

mod lab;

use std::path::{Path, PathBuf};

use kproxy_model::Protocol;
use kproxy_sandbox::Netns;
use lab::*;

/// The cgroup v2 path of a thread made where the lab makes `ns`'s sockets.
fn cgroup_of_a_probe(lab: &Lab, ns: &Netns) -> String {
    let text = lab
        .place(ns)
        .try_enter(|| std::fs::read_to_string("/proc/thread-self/cgroup"))
        .expect("a thread in the place")
        .expect("its cgroup file");
    text.lines().find_map(|line| line.strip_prefix("0::")).expect("a cgroup v2 line").to_owned()
}

/// The value of `flag` in `flags`.
fn flag(flags: &[String], flag: &str) -> PathBuf {
    let at = flags.iter().position(|f| f == flag).unwrap_or_else(|| panic!("{flag} in {flags:?}"));
    PathBuf::from(&flags[at + 1])
}

/// Whether `ss` shows a TCP listener in `ns` whose socket belongs to
/// `cgroup`: by path, or (where `ss` looks for the hierarchy elsewhere, as
/// in a hybrid layout) as `unreachable:<id>`, the id being the directory's
/// inode number.
fn listens_in(ns: &Netns, cgroup: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let listed = ns.exec("ss", &["-tlnH", "--cgroup"]).unwrap_or_else(|e| panic!("ss in {}: {e}", ns.name()));
    let id = std::fs::metadata(cgroup).expect("the cgroup's directory").ino();
    let name = cgroup.file_name().expect("a name").to_string_lossy().into_owned();
    listed.lines().any(|line| line.ends_with(&format!("/{name}")) || line.ends_with(&format!("unreachable:{id:x}")))
}

#[test]
fn node_a_and_its_pods_run_in_the_labs_cgroup_and_the_outside_and_node_b_do_not() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    let plain = cgroup_of_a_probe(&lab, lab.node());
    let flags = lab.ebpf_flags();
    let cgroup = flag(&flags, "--ebpf-cgroup");
    let pin_dir = flag(&flags, "--ebpf-pin-dir");
    assert_eq!(flag(&flags, "--ebpf-devices"), Path::new("eth0"));
    let tail = |path: &Path| path.file_name().expect("a name").to_string_lossy().into_owned();
    assert_eq!(std::fs::read_to_string(cgroup.join("cgroup.type")).expect("its type").trim(), "threaded");

    for ns in [lab.node(), &lab.pod("web-a1").ns] {
        let seen = cgroup_of_a_probe(&lab, ns);
        assert!(seen.ends_with(&format!("/{}", tail(&cgroup))), "{}: {seen}", ns.name());
    }
    for ns in [lab.client(), &lab.topo.node_b.ns, &lab.pod("web-b1").ns] {
        let seen = cgroup_of_a_probe(&lab, ns);
        assert!(!seen.contains(&tail(&cgroup)), "{}: {seen}", ns.name());
    }
    assert_ne!(plain, cgroup_of_a_probe(&lab, lab.node()));

    // What a tracer is told: node-a's and its pods' sources are in the cgroup.
    assert!(lab.source_in_cgroup(lab.pod("web-a1").ipv4.into()) && lab.source_in_cgroup(lab.topo.node.ipv4.into()));
    assert!(!lab.source_in_cgroup(lab.pod("web-b1").ipv4.into()) && !lab.source_in_cgroup([192, 168, 77, 100].into()));

    // node-a's backend serves again, from sockets in the cgroup; node-b's does not move.
    assert!(listens_in(&lab.pod("web-a1").ns, &cgroup), "web-a1's listener is in the cgroup");
    assert!(!listens_in(&lab.pod("web-b1").ns, &cgroup), "web-b1's listener is not");
    let web_a1 = format!("{}:{PORT}", lab.pod("web-a1").ipv4);
    assert_eq!(lab.request(lab.client(), &web_a1, Protocol::Tcp, None), answered("web-a1", [192, 168, 77, 100]));
    assert_eq!(lab.request(lab.node(), &web_a1, Protocol::Udp, None), answered("web-a1", [10, 244, 1, 1]));

    // The pin folder is inside a bpffs the lab mounted in its own folder.
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("the mount table");
    let bpffs = pin_dir.parent().expect("the mount point").to_owned();
    assert!(bpffs.starts_with(lab.dir.path()) && pin_dir.is_dir(), "{}", pin_dir.display());
    assert!(mounts.contains(&format!("bpf {} bpf", bpffs.display())), "{mounts}");
    // A second start (a restart) reuses both.
    assert_eq!(lab.ebpf_flags(), flags);

    drop(lab);
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("the mount table");
    assert!(!mounts.contains(&bpffs.display().to_string()), "still mounted: {mounts}");
    assert!(!cgroup.exists() && !cgroup.parent().expect("a parent").exists(), "{} is left", cgroup.display());
}
