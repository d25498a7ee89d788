//! Keeping the folder's objects current: inotify, debounced but never for
//! longer than `max_wait`, plus a slow periodic rescan for filesystems that
//! do not notify.

use std::time::Duration;

use kproxy_state::SourceEvent;
use notify::{RecursiveMode, Watcher};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::SourceError;
use super::folder::{Folder, Reload};

/// How eagerly to re-read the folder.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// Quiet time after the last change notification before reading: an
    /// editor's save is several events.
    pub debounce: Duration,
    /// Longest a read waits for the changes to settle, from the first
    /// change: a folder that never stops changing is still read this often.
    /// kproxy passes `minSyncPeriod`, the fastest it would sync anyway.
    pub max_wait: Duration,
    /// Re-read this long after the last read even without notifications.
    pub rescan: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self { debounce: Duration::from_millis(200), max_wait: Duration::from_secs(1), rescan: Duration::from_secs(60) }
    }
}

/// What the source counts.
#[derive(Clone, Debug, Default)]
pub struct SourceCounters {
    /// Every skipped document.
    pub invalid_documents: Counter,
    /// Every read of the folder.
    pub reads: Counter,
}

/// The folder, watched, feeding events to the state.
pub struct ManifestSource {
    folder: Folder,
    options: WatchOptions,
    counters: SourceCounters,
}

impl ManifestSource {
    pub fn new(folder: Folder, options: WatchOptions, counters: SourceCounters) -> Self {
        Self { folder, options, counters }
    }

    /// Reads the folder, logs what it found, and returns the events.
    fn read(&mut self) -> Result<Vec<SourceEvent>, SourceError> {
        self.counters.reads.inc();
        // A cluster dump takes seconds to parse: on a multi-threaded
        // runtime, its other tasks move to another thread meanwhile.
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        let reload = match flavor {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| self.folder.reload()),
            _ => self.folder.reload(),
        }?;
        Ok(self.report(reload))
    }

    fn report(&self, reload: Reload) -> Vec<SourceEvent> {
        for e in &reload.errors {
            error!(error = %e, "skipping manifest document");
            self.counters.invalid_documents.inc();
        }
        for skipped in &reload.skipped {
            debug!(document = %skipped, "kind not used by kproxy");
        }
        for warning in &reload.warnings {
            warn!(warning = %warning, "field read leniently, as kube-proxy reads it");
        }
        for unknown in &reload.unknown_fields {
            warn!(warning = %unknown, "unknown field in a manifest; ignored");
        }
        for kept in &reload.kept {
            warn!(object = %kept, "file has errors; keeping the object's last valid version until it is fixed");
        }
        if !reload.events.is_empty() {
            info!(dir = %self.folder.dir().display(), files = reload.files, changes = reload.events.len(), "manifests read");
        }
        reload.events
    }

    /// Sends the initial objects and `Synced`, then follows changes until
    /// the receiver goes away. Errors reading the folder later are logged
    /// and the last good objects kept: a remounted ConfigMap or a folder
    /// being replaced must not take services down.
    pub async fn run(mut self, events: mpsc::Sender<SourceEvent>) -> Result<(), SourceError> {
        let (notify_tx, mut notified) = mpsc::unbounded_channel();
        let watch_error = |source| SourceError::Watch { path: self.folder.dir().to_owned(), source };
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
            // Opening and reading files (kproxy's own reads among them) is
            // no change: reacting to it would re-read the folder forever.
            if result.as_ref().is_ok_and(|e| matches!(e.kind, notify::EventKind::Access(_))) {
                return;
            }
            // A closed receiver means the source is shutting down.
            let _ = notify_tx.send(());
        })
        .map_err(watch_error)?;
        watcher.watch(self.folder.dir(), RecursiveMode::Recursive).map_err(watch_error)?;

        let initial = self.read()?;
        for event in initial.into_iter().chain([SourceEvent::Synced]) {
            if events.send(event).await.is_err() {
                return Ok(());
            }
        }
        loop {
            let rescan_at = Instant::now() + self.options.rescan;
            tokio::select! {
                note = notified.recv() => {
                    if note.is_none() || !settle(&mut notified, &self.options, rescan_at).await {
                        return Ok(());
                    }
                }
                () = tokio::time::sleep_until(rescan_at) => {}
            }
            let changes = match self.read() {
                Ok(changes) => changes,
                Err(e) => {
                    warn!(error = %e, "cannot read the manifest folder; keeping the last objects");
                    continue;
                }
            };
            for event in changes {
                if events.send(event).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// Lets a burst of changes settle, the first of which was just received:
/// returns once no change came for `debounce`, or `max_wait` after the
/// first change (or at `rescan_at`), whichever is first: a folder rewritten
/// faster than the debounce is still read. False when the watcher is gone.
async fn settle(notified: &mut mpsc::UnboundedReceiver<()>, options: &WatchOptions, rescan_at: Instant) -> bool {
    let deadline = (Instant::now() + options.max_wait).min(rescan_at);
    loop {
        let now = Instant::now();
        // Checked before waiting: with changes always queued, the wait
        // below would never time out.
        if now >= deadline {
            return true;
        }
        match tokio::time::timeout_at((now + options.debounce).min(deadline), notified.recv()).await {
            Ok(Some(())) => {}
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}
