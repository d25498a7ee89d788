//! Keeping the folder's objects current: inotify, debounced, plus a slow
//! periodic rescan for filesystems that do not notify.

use std::time::Duration;

use kproxy_state::SourceEvent;
use notify::{RecursiveMode, Watcher};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use super::SourceError;
use super::folder::{Folder, Reload};

/// How eagerly to re-read the folder.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// Quiet time after the last change notification before reading: an
    /// editor's save is several events.
    pub debounce: Duration,
    /// Re-read this often even without notifications.
    pub rescan: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self { debounce: Duration::from_millis(200), rescan: Duration::from_secs(60) }
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

    /// Reads the folder once, logs what it found, and returns the events.
    pub fn load(&mut self) -> Result<Vec<SourceEvent>, SourceError> {
        let reload = self.reload()?;
        Ok(self.report(reload))
    }

    fn reload(&mut self) -> Result<Reload, SourceError> {
        self.counters.reads.inc();
        self.folder.reload()
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
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
            // Opening and reading files (kproxy's own reads among them) is
            // no change: reacting to it would re-read the folder forever.
            if result.as_ref().is_ok_and(|e| matches!(e.kind, notify::EventKind::Access(_))) {
                return;
            }
            // A closed receiver means the source is shutting down.
            let _ = notify_tx.send(result.is_ok());
        })
        .map_err(|source| SourceError::Watch { path: self.folder.dir().to_owned(), source })?;
        watcher
            .watch(self.folder.dir(), RecursiveMode::Recursive)
            .map_err(|source| SourceError::Watch { path: self.folder.dir().to_owned(), source })?;

        let initial = self.load()?;
        for event in initial.into_iter().chain([SourceEvent::Synced]) {
            if events.send(event).await.is_err() {
                return Ok(());
            }
        }
        let mut rescan = tokio::time::interval(self.options.rescan);
        rescan.tick().await;
        loop {
            tokio::select! {
                note = notified.recv() => {
                    if note.is_none() {
                        return Ok(());
                    }
                    // Let the burst settle.
                    loop {
                        match tokio::time::timeout(self.options.debounce, notified.recv()).await {
                            Ok(Some(_)) => continue,
                            Ok(None) => return Ok(()),
                            Err(_) => break,
                        }
                    }
                }
                _ = rescan.tick() => {}
            }
            let changes = match self.reload() {
                Ok(reload) => self.report(reload),
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
