//! Real-kernel tests of the test cgroups: threads entered through
//! [`Netns::enter_in`] sit in the lab's threaded child, sockets made there
//! belong to it, and dropping the last [`Cgroup`] puts the process back
//! and removes every directory. They need root and cgroup v2, and fail
//! (never skip) without them.
//!
//! Every test here takes one lock: they all move this process between
//! cgroups and compare where it is.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kproxy_sandbox::{Bpffs, Cgroup, Netns, Place, available};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new("cgroup").expect("a namespace")
}

/// This thread's cgroup v2 path, as `/proc/thread-self/cgroup` says (`0::<path>`).
fn thread_cgroup() -> String {
    let text = std::fs::read_to_string("/proc/thread-self/cgroup").expect("reading /proc/thread-self/cgroup");
    text.lines().find_map(|line| line.strip_prefix("0::")).expect("a cgroup v2 line").to_owned()
}

fn process_cgroup() -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").expect("reading /proc/self/cgroup");
    text.lines().find_map(|line| line.strip_prefix("0::")).expect("a cgroup v2 line").to_owned()
}

/// The end of `path` that /proc shows: the last two components (parent/child).
fn tail(path: &Path, components: usize) -> PathBuf {
    let all: Vec<_> = path.components().collect();
    all[all.len() - components..].iter().collect()
}

#[test]
fn a_thread_entered_in_a_cgroup_reports_the_child_and_drop_restores_the_process() {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let ns = netns();
    let before = process_cgroup();
    let cgroup = Cgroup::new("lab").expect("a test cgroup");
    let child = cgroup.path().to_owned();
    let parent = child.parent().expect("the child has a parent").to_owned();
    assert_eq!(std::fs::read_to_string(child.join("cgroup.type")).expect("its type").trim(), "threaded");

    let inside = ns.enter_in(&cgroup, thread_cgroup);
    assert!(inside.ends_with(&*tail(&child, 2).to_string_lossy()), "{inside} is not {}", child.display());
    // The process itself (and a plain entered thread) sits in the parent, not the child.
    let plain = ns.enter(thread_cgroup);
    assert!(plain.ends_with(&*tail(&parent, 1).to_string_lossy()), "{plain}");
    assert!(process_cgroup().ends_with(&*tail(&parent, 1).to_string_lossy()));

    drop(cgroup);
    assert!(!child.exists() && !parent.exists(), "{} is left", parent.display());
    assert_eq!(process_cgroup(), before, "the process is back where it was");
}

#[test]
fn labs_share_one_parent_each_with_its_own_child_until_the_last_goes() {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let ns = netns();
    let before = process_cgroup();
    let first = Cgroup::new("one").expect("a first cgroup");
    let second = Cgroup::new("two").expect("a second cgroup");
    assert_ne!(first.path(), second.path());
    assert_eq!(first.path().parent(), second.path().parent(), "one parent per process");
    let parent = first.path().parent().expect("a parent").to_owned();

    let in_second = Place::new(&ns, Some(&second)).try_enter(thread_cgroup).expect("entered");
    assert!(in_second.ends_with(&*tail(second.path(), 2).to_string_lossy()), "{in_second}");

    drop(first);
    assert!(parent.exists(), "the parent stays while a child lives");
    assert!(ns.enter_in(&second, thread_cgroup).ends_with(&*tail(second.path(), 2).to_string_lossy()));
    drop(second);
    assert!(!parent.exists());
    assert_eq!(process_cgroup(), before);
}

#[test]
fn a_panic_inside_an_entered_thread_still_cleans_up() {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let ns = netns();
    let before = process_cgroup();
    let mut path = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let cgroup = Cgroup::new("panics").expect("a test cgroup");
        path = Some(cgroup.path().to_owned());
        ns.enter_in(&cgroup, || panic!("a failing test"));
    }));
    assert!(outcome.is_err());
    let path = path.expect("the cgroup was made");
    assert!(!path.exists() && !path.parent().expect("a parent").exists());
    assert_eq!(process_cgroup(), before);
}

#[test]
fn a_private_bpffs_is_mounted_and_gone_after_drop() {
    let _ = netns();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let point = dir.path().join("bpffs");
    let bpffs = Bpffs::mount(&point).expect("mounting a bpffs");
    let pins = bpffs.dir("kproxy").expect("a directory inside");
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    let listed = format!("bpf {} bpf", point.display());
    assert!(mounts.contains(&listed), "{mounts}");
    assert!(pins.is_dir());
    drop(bpffs);
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(!mounts.contains(&listed), "still mounted: {mounts}");
    assert!(!point.exists());
}

#[test]
fn a_socket_made_in_an_entered_thread_stays_in_the_child_when_used_elsewhere() {
    use std::os::unix::fs::MetadataExt;
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let ns = netns();
    let cgroup = Cgroup::new("socket").expect("a test cgroup");
    let to = "127.0.0.1:9".parse().expect("literal");
    // Opened (socket made) inside the cgroup; this thread, outside it, keeps using it.
    let flow = kproxy_sandbox::UdpFlow::open(Place::new(&ns, Some(&cgroup)), to, Duration::from_millis(100))
        .expect("a UDP flow");
    let port = flow.local_addr().expect("its address").port();
    let listed = ns.exec("ss", &["-uanH", "--cgroup"]).expect("ss");
    let id = std::fs::metadata(cgroup.path()).expect("the cgroup").ino();
    let name = cgroup.path().file_name().expect("a name").to_string_lossy().into_owned();
    let line = listed.lines().find(|line| line.contains(&format!(":{port} "))).unwrap_or_else(|| panic!("{listed}"));
    assert!(line.ends_with(&format!("/{name}")) || line.ends_with(&format!("unreachable:{id:x}")), "{line}");
}

#[test]
fn a_program_run_with_output_joins_the_namespace_and_keeps_the_callers_mounts() {
    let ns = netns();
    let mut command = std::process::Command::new("cat");
    command.arg("/proc/self/mountinfo");
    let mounts = ns.output(command).expect("cat runs");
    assert!(mounts.contains(" - cgroup2 "), "the cgroup2 mount is visible: {mounts}");
    let mut command = std::process::Command::new("ip");
    command.args(["-o", "link"]);
    let links = ns.output(command).expect("ip runs");
    assert_eq!(links.lines().count(), 1, "only the namespace's lo: {links}");
}
