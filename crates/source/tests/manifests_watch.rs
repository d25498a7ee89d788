//! The manifest folder while it changes: a writer that never pauses is
//! still read, atomic renames and ConfigMap symlink swaps are picked up,
//! and a ConfigMap volume's hidden directories are not read twice.
//!
//! Timing: every assertion is "within a bound" with a wide margin for a
//! loaded machine, and every writer is bounded in count and time.

mod configmap;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use configmap::Volume;
use kproxy_source::manifests::{Folder, ManifestSource, SourceCounters, WatchOptions};
use kproxy_state::{Object, SourceEvent};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// A Service whose cluster IP tells which version of the file it came from.
fn service(version: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec:\n  clusterIP: 10.96.{}.{}\n  ports: [{{port: 80}}]\n",
        version / 250,
        version % 250 + 1
    )
}

fn version_of(event: &SourceEvent) -> Option<u32> {
    let SourceEvent::Apply(Object::Service(s)) = event else { return None };
    let ip = s.cluster_ips[0].to_string();
    let octets: Vec<u32> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    Some(octets[2] * 250 + octets[3] - 1)
}

fn pod(name: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nstatus: {{podIP: 10.1.0.1}}\n")
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n";

fn keys(events: &[SourceEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            SourceEvent::Apply(o) => format!("apply {}", o.key()),
            SourceEvent::Delete(k) => format!("delete {k}"),
            other => format!("{other:?}"),
        })
        .collect()
}

/// A running source and what it sends.
struct Running {
    events: mpsc::Receiver<SourceEvent>,
    reads: Counter,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Starts watching `dir` and takes the initial objects up to `Synced`.
    async fn start(dir: &Path, options: WatchOptions) -> (Self, Vec<SourceEvent>) {
        let counters = SourceCounters::default();
        let reads = counters.reads.clone();
        let source = ManifestSource::new(Folder::new(dir).unwrap(), options, counters);
        let (tx, events) = mpsc::channel(1024);
        let task = tokio::spawn(async move { source.run(tx).await.unwrap() });
        let mut running = Self { events, reads, task };
        let mut initial = Vec::new();
        loop {
            match running.next(Duration::from_secs(10)).await {
                Some(SourceEvent::Synced) => return (running, initial),
                Some(event) => initial.push(event),
                None => panic!("no Synced within 10 s; got {:?}", keys(&initial)),
            }
        }
    }

    async fn next(&mut self, within: Duration) -> Option<SourceEvent> {
        tokio::time::timeout(within, self.events.recv()).await.ok().flatten()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a writer replaces the file.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// `open(O_TRUNC)` and write, as `echo > file` does.
    InPlace,
    /// Write a hidden temporary file and rename it over the file.
    Rename,
    /// A ConfigMap volume update.
    SymlinkSwap,
}

fn write_version(dir: &Path, style: Style, volume: &mut Volume, version: u32) {
    let text = service(version);
    match style {
        Style::InPlace => std::fs::write(dir.join("web.yaml"), text).unwrap(),
        Style::Rename => {
            std::fs::write(dir.join(".web.yaml.tmp"), text).unwrap();
            std::fs::rename(dir.join(".web.yaml.tmp"), dir.join("web.yaml")).unwrap();
        }
        Style::SymlinkSwap => volume.project(&[("web.yaml", &text)]),
    }
}

/// Rewrites the Service every 50 ms (at most 400 times, 40 s) until told to
/// stop; says when it stopped on its own.
fn never_pausing_writer(dir: &Path, style: Style, stop: Arc<AtomicBool>, done: Arc<AtomicBool>) {
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut volume = Volume::new(&dir);
        for version in 2..402 {
            if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(40) {
                break;
            }
            write_version(&dir, style, &mut volume, version);
            std::thread::sleep(Duration::from_millis(50));
        }
        done.store(true, Ordering::SeqCst);
    });
}

/// With a debounce far longer than the writer's pauses, the folder is read
/// anyway: at least twice while the writer is still writing, within a
/// bound of seconds (the wait is capped at `max_wait` or `rescan`).
async fn read_while_changing(style: Style, options: WatchOptions) {
    let dir = tempfile::tempdir().unwrap();
    write_version(dir.path(), style, &mut Volume::new(dir.path()), 1);
    let (mut source, initial) = Running::start(dir.path(), options).await;
    assert_eq!(initial.iter().filter_map(version_of).collect::<Vec<_>>(), [1]);

    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    never_pausing_writer(dir.path(), style, stop.clone(), done.clone());
    let mut seen = Vec::new();
    let started = Instant::now();
    while seen.len() < 2 && started.elapsed() < Duration::from_secs(20) {
        if let Some(version) = source.next(Duration::from_secs(1)).await.as_ref().and_then(version_of) {
            assert!(!done.load(Ordering::SeqCst), "read only after the writer stopped");
            seen.push(version);
        }
    }
    stop.store(true, Ordering::SeqCst);
    assert_eq!(seen.len(), 2, "{style:?}: the Service was not re-read while being rewritten every 50 ms");
    assert!(seen[0] > 1 && seen[1] > seen[0], "{seen:?}");
}

fn capped(max_wait: Duration, rescan: Duration) -> WatchOptions {
    WatchOptions { debounce: Duration::from_secs(10), max_wait, rescan }
}

#[tokio::test]
async fn a_file_rewritten_in_place_without_pause_is_read_at_least_every_max_wait() {
    read_while_changing(Style::InPlace, capped(Duration::from_millis(300), Duration::from_secs(3600))).await;
}

#[tokio::test]
async fn a_file_replaced_by_renames_without_pause_is_read_at_least_every_max_wait() {
    read_while_changing(Style::Rename, capped(Duration::from_millis(300), Duration::from_secs(3600))).await;
}

#[tokio::test]
async fn a_configmap_swapped_without_pause_is_read_at_least_every_max_wait() {
    read_while_changing(Style::SymlinkSwap, capped(Duration::from_millis(300), Duration::from_secs(3600))).await;
}

#[tokio::test]
async fn the_periodic_rescan_is_not_held_back_by_changes_that_never_settle() {
    read_while_changing(Style::InPlace, capped(Duration::from_secs(3600), Duration::from_millis(500))).await;
}

#[tokio::test]
async fn a_burst_of_writes_is_read_once_when_it_settles() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("web.yaml"), service(1)).unwrap();
    let options =
        WatchOptions { debounce: Duration::from_secs(2), ..capped(Duration::from_secs(30), Duration::from_secs(3600)) };
    let (mut source, _) = Running::start(dir.path(), options).await;
    for version in 2..=6 {
        std::fs::write(dir.path().join("web.yaml"), service(version)).unwrap();
        // The source runs meanwhile, and sees each write.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let event = source.next(Duration::from_secs(15)).await.expect("read within 15 s");
    assert_eq!(version_of(&event), Some(6), "{event:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(source.reads.get(), 2, "the initial read and one for the burst");
    assert!(source.events.try_recv().is_err());
}

#[tokio::test]
async fn each_atomic_rename_and_each_configmap_swap_is_picked_up() {
    for style in [Style::Rename, Style::SymlinkSwap] {
        let dir = tempfile::tempdir().unwrap();
        let mut volume = Volume::new(dir.path());
        write_version(dir.path(), style, &mut volume, 1);
        let options = WatchOptions {
            debounce: Duration::from_millis(100),
            ..capped(Duration::from_secs(1), Duration::from_secs(3600))
        };
        let (mut source, _) = Running::start(dir.path(), options).await;
        for version in 2..=4 {
            write_version(dir.path(), style, &mut volume, version);
            let event = source.next(Duration::from_secs(15)).await;
            assert_eq!(event.as_ref().and_then(version_of), Some(version), "{style:?}: {event:?}");
        }
    }
}

#[tokio::test]
async fn a_configmap_swap_that_adds_and_removes_keys_applies_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let mut volume = Volume::new(dir.path());
    volume.project(&[("services.yaml", &service(1)), ("pods.yaml", &pod("p1"))]);
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        ..capped(Duration::from_secs(1), Duration::from_secs(3600))
    };
    let (mut source, initial) = Running::start(dir.path(), options).await;
    assert_eq!(keys(&initial), ["apply Service default/web", "apply Pod default/p1"]);
    volume.project(&[("services.yaml", &service(1)), ("nodes.yaml", NODE)]);
    let mut changes = Vec::new();
    while changes.len() < 2 {
        changes.push(source.next(Duration::from_secs(15)).await.expect("each change within 15 s"));
    }
    changes.sort_by_key(|e| matches!(e, SourceEvent::Delete(_)));
    assert_eq!(keys(&changes), ["apply Node node-a", "delete Pod default/p1"]);
}

#[test]
fn a_configmap_volume_is_read_through_its_top_level_names_at_every_step_of_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let mut volume = Volume::new(dir.path());
    volume.project(&[("services.yaml", &service(1)), ("pods.yaml", &pod("p1"))]);
    let mut folder = Folder::new(dir.path()).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(keys(&reload.events), ["apply Service default/web", "apply Pod default/p1"]);
    assert!(reload.errors.is_empty(), "{:?}", reload.errors);
    assert_eq!(reload.files, 2, "the files under ..data are not read a second time");

    // The reader may look at any moment of the kubelet's update.
    let mut events = Vec::new();
    volume.project_with(&[("services.yaml", &service(2)), ("nodes.yaml", NODE)], |step| {
        let reload = folder.reload().unwrap();
        let errors: Vec<String> = reload.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors, Vec::<String>::new(), "after step {step:?}");
        events.extend(reload.events);
    });
    let mut changes = keys(&events);
    changes.sort();
    assert_eq!(changes, ["apply Node node-a", "apply Service default/web", "delete Pod default/p1"]);
}

#[test]
fn a_symlink_loop_or_a_folder_linked_twice_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pods")).unwrap();
    std::fs::write(dir.path().join("pods/p1.yaml"), pod("p1")).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("loop")).unwrap();
    std::os::unix::fs::symlink("pods", dir.path().join("also-pods")).unwrap();
    std::os::unix::fs::symlink("pods/p1.yaml", dir.path().join("p1-again.yaml")).unwrap();
    let reload = Folder::new(dir.path()).unwrap().reload().unwrap();
    let errors: Vec<String> = reload.errors.iter().map(ToString::to_string).collect();
    assert!(errors.is_empty(), "{} errors, the first: {}", errors.len(), errors[0]);
    assert_eq!(keys(&reload.events), ["apply Pod default/p1"]);
    assert_eq!(reload.files, 1);
}
