//! The objects, numbered by one global resourceVersion counter like etcd's
//! revision; the change history that watches replay and past reads use; and
//! the queues of the open watches.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::resource::Resource;
use super::uuid;

/// One write.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) resource: Resource,
    pub(crate) rv: u64,
    /// Before the write; `None` for a create.
    pub(crate) old: Option<Arc<Value>>,
    /// After the write; `None` for a delete.
    pub(crate) new: Option<Arc<Value>>,
}

/// A read or watch from before the compacted revision.
#[derive(Debug)]
pub(crate) struct Compacted {
    pub(crate) oldest: u64,
}

/// Where a new watch starts.
pub(crate) enum Start {
    /// From the current state: every object, at `rv`.
    Current { objects: Vec<Arc<Value>>, rv: u64 },
    /// From `rv`: the writes after it.
    After { changes: Vec<Arc<Change>>, rv: u64 },
}

pub(crate) struct Subscription {
    pub(crate) start: Start,
    /// Later writes to the resource; closed when watches are disconnected.
    pub(crate) changes: UnboundedReceiver<Arc<Change>>,
}

pub(crate) type Objects = BTreeMap<String, Arc<Value>>;

#[derive(Default)]
pub(crate) struct Store {
    rv: u64,
    compacted: u64,
    objects: BTreeMap<Resource, Objects>,
    /// Sorted by rv.
    history: Vec<Arc<Change>>,
    subscribers: Vec<(Resource, UnboundedSender<Arc<Change>>)>,
}

impl Store {
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Creates or updates; with `keep_rv` an object's own resourceVersion is kept
    /// (a captured fixture), else the next revision is assigned.
    pub(crate) fn apply(&mut self, resource: Resource, mut object: Value, keep_rv: bool) -> u64 {
        let map = object.as_object_mut().expect("an object must be a JSON object");
        map.remove("kind");
        map.remove("apiVersion");
        let metadata = &mut object["metadata"];
        if resource.namespaced() {
            if metadata["namespace"].as_str().is_none_or(str::is_empty) {
                metadata["namespace"] = "default".into();
            }
        } else if let Some(metadata) = metadata.as_object_mut() {
            metadata.remove("namespace");
        }
        if metadata["name"].as_str().is_none_or(str::is_empty) {
            let prefix = metadata["generateName"].as_str().expect("an object needs a name or a generateName");
            metadata["name"] = format!("{prefix}{}", name_suffix()).into();
        }
        let key = key(resource, metadata);
        let old = self.objects.get(&resource).and_then(|objects| objects.get(&key)).cloned();

        let own_rv = metadata["resourceVersion"].as_str().and_then(|rv| rv.parse().ok()).filter(|_| keep_rv);
        let rv = match own_rv {
            Some(rv) => {
                self.rv = self.rv.max(rv);
                rv
            }
            None => {
                self.rv += 1;
                self.rv
            }
        };
        let inherited = |field: &str| old.as_ref().map(|old| old["metadata"][field].clone()).filter(|v| !v.is_null());
        for field in ["uid", "creationTimestamp"] {
            if let Some(value) = inherited(field) {
                metadata[field] = value;
            }
        }
        if metadata["uid"].is_null() {
            metadata["uid"] = uuid::new_v4().into();
        }
        if metadata["creationTimestamp"].is_null() {
            metadata["creationTimestamp"] = now().into();
        }
        if resource == Resource::EndpointSlices && !keep_rv {
            // The slice strategy counts every write in metadata.generation.
            let previous = old.as_ref().and_then(|old| old["metadata"]["generation"].as_u64()).unwrap_or(0);
            metadata["generation"] = (previous + 1).into();
        }
        metadata["resourceVersion"] = rv.to_string().into();

        let new = Arc::new(object);
        self.objects.entry(resource).or_default().insert(key, new.clone());
        self.record(Change { resource, rv, old, new: Some(new) });
        rv
    }

    pub(crate) fn delete(&mut self, resource: Resource, key: &str) -> Option<u64> {
        let old = self.objects.get_mut(&resource)?.remove(key)?;
        self.rv += 1;
        self.record(Change { resource, rv: self.rv, old: Some(old), new: None });
        Some(self.rv)
    }

    /// Moves the counter forward without a write (unrelated writes elsewhere).
    pub(crate) fn advance_to(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        let at = self.history.partition_point(|c| c.rv <= change.rv);
        self.history.insert(at, change.clone());
        self.subscribers.retain(|(resource, queue)| *resource != change.resource || queue.send(change.clone()).is_ok());
    }

    /// The objects of `resource` as they were at `rv` (now when `None`).
    pub(crate) fn snapshot(&self, resource: Resource, rv: Option<u64>) -> Result<Cow<'_, Objects>, Compacted> {
        static EMPTY: Objects = BTreeMap::new();
        let current = self.objects.get(&resource).unwrap_or(&EMPTY);
        let Some(rv) = rv else { return Ok(Cow::Borrowed(current)) };
        if rv < self.compacted {
            return Err(Compacted { oldest: self.compacted });
        }
        let mut later = self.history.iter().rev().take_while(|c| c.rv > rv).filter(|c| c.resource == resource);
        // Nothing of this resource changed since `rv` (every page of a list
        // read at the latest revision): the current objects are that
        // snapshot, without copying 100k entries per page.
        let Some(first) = later.next() else { return Ok(Cow::Borrowed(current)) };
        let mut objects = current.clone();
        for change in std::iter::once(first).chain(later) {
            let now = change.new.as_ref().or(change.old.as_ref()).expect("a change has a state");
            let key = key(resource, &now["metadata"]);
            match &change.old {
                Some(old) => objects.insert(key, old.clone()),
                None => objects.remove(&key),
            };
        }
        Ok(Cow::Owned(objects))
    }

    /// Opens a watch queue, from now or from the writes after `after`.
    pub(crate) fn subscribe(&mut self, resource: Resource, after: Option<u64>) -> Result<Subscription, Compacted> {
        let start = match after {
            None => Start::Current {
                objects: self.objects.get(&resource).into_iter().flat_map(|o| o.values().cloned()).collect(),
                rv: self.rv,
            },
            Some(rv) if rv < self.compacted => return Err(Compacted { oldest: self.compacted }),
            Some(rv) => {
                let later = &self.history[self.history.partition_point(|c| c.rv <= rv)..];
                let changes = later.iter().filter(|c| c.resource == resource).cloned().collect();
                Start::After { changes, rv }
            }
        };
        let (queue, changes) = unbounded_channel();
        self.subscribers.push((resource, queue));
        Ok(Subscription { start, changes })
    }

    /// Forgets the history: reads and watches from before now get 410.
    pub(crate) fn compact(&mut self) {
        self.compacted = self.rv;
        self.history.retain(|c| c.rv > self.compacted);
    }

    /// Closes every watch queue.
    pub(crate) fn disconnect(&mut self) {
        self.subscribers.clear();
    }
}

fn key(resource: Resource, metadata: &Value) -> String {
    let field = |name: &str| metadata[name].as_str().unwrap_or_default();
    resource.key(field("namespace"), field("name"))
}

fn now() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).expect("now is a valid timestamp").to_string()
}

/// Five characters from the alphabet Kubernetes uses for generated names.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = uuid::random();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize];
            n /= ALPHABET.len() as u64;
            char::from(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(name: &str, labels: Value) -> Value {
        json!({"kind": "Service", "apiVersion": "v1", "metadata": {"name": name, "namespace": "shop", "labels": labels}})
    }

    #[test]
    fn writes_take_the_next_global_revision_and_keep_uid() {
        let mut store = Store::default();
        assert_eq!(store.apply(Resource::Services, service("web", json!({})), false), 1);
        assert_eq!(store.apply(Resource::Nodes, json!({"metadata": {"name": "node-a"}}), false), 2);
        let uid = store.snapshot(Resource::Services, None).unwrap()["shop/web"]["metadata"]["uid"].clone();
        assert_eq!(store.apply(Resource::Services, service("web", json!({"a": "b"})), false), 3);
        let web = store.snapshot(Resource::Services, None).unwrap()["shop/web"].clone();
        assert_eq!(web["metadata"]["uid"], uid);
        assert_eq!(web["metadata"]["resourceVersion"], "3");
        assert!(web.get("kind").is_none());
        assert_eq!(store.delete(Resource::Services, "shop/web"), Some(4));
        assert_eq!(store.delete(Resource::Services, "shop/web"), None);
    }

    #[test]
    fn snapshots_roll_back_to_a_past_revision_until_compacted() {
        let mut store = Store::default();
        store.apply(Resource::Services, service("web", json!({})), false);
        store.apply(Resource::Services, service("db", json!({})), false);
        store.apply(Resource::Services, service("web", json!({"v": "2"})), false);
        store.delete(Resource::Services, "shop/db");
        let at = |store: &Store, rv| {
            store.snapshot(Resource::Services, Some(rv)).map(|o| o.keys().cloned().collect::<Vec<_>>())
        };
        assert_eq!(at(&store, 1).unwrap(), ["shop/web"]);
        assert_eq!(at(&store, 3).unwrap(), ["shop/db", "shop/web"]);
        let web_at_2 = store.snapshot(Resource::Services, Some(2)).unwrap()["shop/web"].clone();
        assert_eq!(web_at_2["metadata"]["resourceVersion"], "1");
        store.compact();
        assert_eq!(at(&store, 3).unwrap_err().oldest, 4);
        assert_eq!(at(&store, 4).unwrap(), ["shop/web"]);
    }

    #[test]
    fn generated_names_and_slice_generations() {
        let mut store = Store::default();
        let slice = json!({"metadata": {"generateName": "web-", "namespace": "shop"}, "addressType": "IPv4"});
        store.apply(Resource::EndpointSlices, slice, false);
        let objects = store.snapshot(Resource::EndpointSlices, None).unwrap();
        let (key, object) = objects.iter().next().unwrap();
        assert!(key.starts_with("shop/web-") && key.len() == "shop/web-".len() + 5, "{key}");
        assert_eq!(object["metadata"]["generation"], 1);
    }
}
