//! One resource's list and watch, folded into `SourceEvent`s.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kproxy_state::convert::{Converted, InvalidObject};
use kproxy_state::intern::intern;
use kproxy_state::{Kind, Object, ObjectKey, SourceEvent};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::client::chain;
use super::{HealthSink, KubeMetrics, Resource};

/// Sends `Synced` once every resource has been listed completely once.
pub(super) struct Gate {
    waiting: AtomicUsize,
    events: mpsc::Sender<SourceEvent>,
}

impl Gate {
    pub(super) fn new(resources: usize, events: mpsc::Sender<SourceEvent>) -> Self {
        Self { waiting: AtomicUsize::new(resources), events }
    }

    /// One resource's first list is complete (its objects already sent).
    async fn listed(&self) -> Result<(), Closed> {
        if self.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.events.send(SourceEvent::Synced).await.map_err(|_| Closed)?;
        }
        Ok(())
    }
}

/// The state went away: stop.
struct Closed;

/// What the state was told of one object: all the source keeps of it
/// (the API object is dropped once converted and sent).
struct Known {
    resource_version: Box<str>,
    /// The state holds a version of it (false while only invalid versions
    /// have been seen).
    applied: bool,
}

/// Follows one resource for the life of the source.
pub(super) struct Follower<'a> {
    resource: Resource,
    kind: Kind,
    events: &'a mpsc::Sender<SourceEvent>,
    metrics: &'a KubeMetrics,
    health: &'a Arc<dyn HealthSink>,
    gate: &'a Gate,
    max_backoff: Duration,
    known: HashMap<ObjectKey, Known>,
    /// Keys seen by the list in progress.
    relisting: Option<HashSet<ObjectKey>>,
    lists: u64,
}

impl<'a> Follower<'a> {
    pub(super) fn new(
        resource: Resource,
        events: &'a mpsc::Sender<SourceEvent>,
        metrics: &'a KubeMetrics,
        health: &'a Arc<dyn HealthSink>,
        gate: &'a Gate,
        max_backoff: Duration,
    ) -> Self {
        let kind = match resource {
            Resource::Services => Kind::Service,
            Resource::EndpointSlices => Kind::EndpointSlice,
            Resource::Nodes => Kind::Node,
            Resource::ServiceCidrs => Kind::ServiceCidr,
        };
        Self {
            resource,
            kind,
            events,
            metrics,
            health,
            gate,
            max_backoff,
            known: HashMap::new(),
            relisting: None,
            lists: 0,
        }
    }

    /// Lists, watches, and after any error waits (800 ms doubling up to
    /// `max_backoff`, reset by the next event) and carries on; returns
    /// only when the state has gone away.
    pub(super) async fn follow<K>(
        mut self,
        api: Api<K>,
        config: watcher::Config,
        convert: impl Fn(&K) -> Result<Converted<Object>, InvalidObject>,
    ) where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let stream = watcher::watcher(api, config);
        let mut stream = std::pin::pin!(stream);
        let mut backoff = Duration::ZERO;
        while let Some(item) = stream.next().await {
            let outcome = match item {
                Ok(event) => {
                    backoff = Duration::ZERO;
                    self.handle(event, &convert).await
                }
                Err(e) => {
                    if self.failed(&e) {
                        backoff = (backoff * 2).max(Duration::from_millis(800)).min(self.max_backoff);
                        tokio::time::sleep(backoff).await;
                    }
                    Ok(())
                }
            };
            if outcome.is_err() {
                return;
            }
        }
    }

    /// Logs and counts a failure; `true` when the retry should wait.
    fn failed(&self, e: &watcher::Error) -> bool {
        let resource = self.resource.as_str();
        self.metrics.errors.get_or_create(&KubeMetrics::label_for(self.resource)).inc();
        let reason = chain(e);
        match e {
            // An expired resource version: the watcher relists next.
            watcher::Error::WatchError(status) if status.code == 410 => {
                info!(resource, reason, "watch expired; relisting");
                false
            }
            _ => {
                warn!(resource, reason, "list or watch failed; keeping the last objects and retrying");
                self.health.lost(self.resource, reason);
                true
            }
        }
    }

    async fn handle<K>(
        &mut self,
        event: Event<K>,
        convert: &impl Fn(&K) -> Result<Converted<Object>, InvalidObject>,
    ) -> Result<(), Closed>
    where
        K: kube::Resource,
    {
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
            }
            Event::InitApply(object) => {
                let key = self.key(&object);
                if let Some(seen) = &mut self.relisting {
                    seen.insert(key.clone());
                }
                self.apply(key, &object, convert).await?;
            }
            Event::InitDone => {
                let seen = self.relisting.take().unwrap_or_default();
                let gone: Vec<ObjectKey> = self.known.keys().filter(|k| !seen.contains(k)).cloned().collect();
                if self.lists > 0 {
                    info!(resource = self.resource.as_str(), objects = seen.len(), deleted = gone.len(), "relisted");
                }
                for key in gone {
                    self.delete(key).await?;
                }
                self.metrics.lists.get_or_create(&KubeMetrics::label_for(self.resource)).inc();
                self.lists += 1;
                if self.lists == 1 {
                    self.gate.listed().await?;
                }
            }
            Event::Apply(object) => {
                let key = self.key(&object);
                self.apply(key, &object, convert).await?;
            }
            Event::Delete(object) => {
                let key = self.key(&object);
                self.delete(key).await?;
            }
        }
        self.metrics.objects.get_or_create(&KubeMetrics::label_for(self.resource)).set(self.known.len() as i64);
        Ok(())
    }

    fn key<K: kube::Resource>(&self, object: &K) -> ObjectKey {
        let namespace = match self.kind.is_namespaced() {
            true => object.meta().namespace.as_deref().filter(|ns| !ns.is_empty()).unwrap_or("default"),
            false => "",
        };
        ObjectKey::new(self.kind, intern(namespace), object.name_any())
    }

    async fn apply<K: kube::Resource>(
        &mut self,
        key: ObjectKey,
        object: &K,
        convert: &impl Fn(&K) -> Result<Converted<Object>, InvalidObject>,
    ) -> Result<(), Closed> {
        let version = object.meta().resource_version.as_deref().unwrap_or_default();
        // A relist repeats what is unchanged; the state has it already.
        if self.known.get(&key).is_some_and(|k| !version.is_empty() && *k.resource_version == *version) {
            return Ok(());
        }
        match convert(object) {
            Ok(Converted { value, warnings }) => {
                // Said at every change of the object, as an invalid one is.
                for warning in &warnings {
                    warn!(warning = %warning, "field read leniently, as kube-proxy reads it");
                }
                // The converted object's key shares its strings with it.
                let converted = value.key();
                let key = if converted == key { converted } else { key };
                self.known.insert(key, Known { resource_version: version.into(), applied: true });
                self.send(SourceEvent::Apply(value), "apply").await
            }
            Err(e) => {
                let applied = self.known.get(&key).is_some_and(|k| k.applied);
                self.metrics.invalid.get_or_create(&KubeMetrics::label_for(self.resource)).inc();
                match applied {
                    true => error!(error = %e, "invalid update; keeping the object's last valid version"),
                    false => error!(error = %e, "invalid object; ignoring it until it is fixed"),
                }
                self.known.insert(key, Known { resource_version: version.into(), applied });
                Ok(())
            }
        }
    }

    async fn delete(&mut self, key: ObjectKey) -> Result<(), Closed> {
        match self.known.remove(&key) {
            Some(Known { applied: true, .. }) => self.send(SourceEvent::Delete(key), "delete").await,
            _ => Ok(()),
        }
    }

    async fn send(&self, event: SourceEvent, what: &'static str) -> Result<(), Closed> {
        let labels = super::metrics::EventLabels { resource: self.resource.as_str(), event: what };
        self.metrics.events.get_or_create(&labels).inc();
        self.events.send(event).await.map_err(|_| Closed)
    }
}
