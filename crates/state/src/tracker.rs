//! Change tracking: many events per object fold into one before/after pair.
//!
//! Like upstream's `ServiceChangeTracker` / `EndpointsChangeTracker`: the
//! first event for an object since the last sync remembers what the object
//! was; later events only move its current value. A pair whose two sides
//! are equal (A -> B -> A) is no change at all.

use std::collections::HashMap;
use std::hash::Hash;

/// Current values by key, plus the value each changed key had when the
/// pending changes were last taken.
#[derive(Debug)]
pub struct ChangeTracker<K, V> {
    current: HashMap<K, V>,
    /// key -> value before the first change since the last `take`.
    previous: HashMap<K, Option<V>>,
    /// How many keys of `previous` differ from `current`, kept up to date on
    /// every change so asking costs nothing during an event storm.
    net_pending: usize,
}

impl<K, V> Default for ChangeTracker<K, V> {
    fn default() -> Self {
        Self { current: HashMap::new(), previous: HashMap::new(), net_pending: 0 }
    }
}

impl<K: Clone + Eq + Hash, V: Clone + PartialEq> ChangeTracker<K, V> {
    pub fn upsert(&mut self, key: K, value: V) {
        let was = self.remember(&key);
        self.current.insert(key.clone(), value);
        self.recount(&key, was);
    }

    pub fn delete(&mut self, key: &K) {
        if self.current.contains_key(key) {
            let was = self.remember(key);
            self.current.remove(key);
            self.recount(key, was);
        }
    }

    /// Records the value before the first change; returns whether `key`
    /// was a net change before this one.
    fn remember(&mut self, key: &K) -> bool {
        match self.previous.get(key) {
            Some(before) => before.as_ref() != self.current.get(key),
            None => {
                self.previous.insert(key.clone(), self.current.get(key).cloned());
                false
            }
        }
    }

    fn recount(&mut self, key: &K, was: bool) {
        let is = self.previous.get(key).is_some_and(|before| before.as_ref() != self.current.get(key));
        match (was, is) {
            (false, true) => self.net_pending += 1,
            (true, false) => self.net_pending -= 1,
            _ => {}
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.current.get(key)
    }

    pub fn current(&self) -> &HashMap<K, V> {
        &self.current
    }

    /// Keys whose value differs from what it was at the last `take`.
    pub fn pending(&self) -> usize {
        self.net_pending
    }

    /// Some key changed since the last `take`, possibly back to what it was.
    pub fn touched(&self) -> bool {
        !self.previous.is_empty()
    }

    /// The net changes since the last call, as (key, before, after).
    pub fn take(&mut self) -> Vec<(K, Option<V>, Option<V>)> {
        let mut changed = Vec::new();
        self.take_with(|key, before, after| changed.push((key, before, after.cloned())));
        changed
    }

    /// The net changes since the last call, handed to `f` as (key, before,
    /// after) without copying the current values; returns how many.
    pub fn take_with(&mut self, mut f: impl FnMut(K, Option<V>, Option<&V>)) -> usize {
        self.net_pending = 0;
        let mut count = 0;
        // Taken, not drained: a drained map keeps the capacity of its
        // largest sync (the first: every object) for the process's life.
        for (key, before) in std::mem::take(&mut self.previous) {
            let after = self.current.get(&key);
            if before.as_ref() != after {
                count += 1;
                f(key, before, after);
            }
        }
        count
    }

    /// Heap bytes of the maps' slots (keys and values inline; what they
    /// point to is the caller's to count).
    pub fn slot_bytes(&self) -> usize {
        crate::memory::hash_slots(self.current.capacity(), size_of::<(K, V)>())
            + crate::memory::hash_slots(self.previous.capacity(), size_of::<(K, Option<V>)>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_updates_fold_into_one_pair() {
        let mut t = ChangeTracker::default();
        t.upsert("a", 1);
        t.upsert("a", 2);
        t.upsert("a", 3);
        assert_eq!(t.pending(), 1);
        assert_eq!(t.take(), vec![("a", None, Some(3))]);
        assert_eq!(t.pending(), 0);
        assert!(t.take().is_empty());
    }

    #[test]
    fn change_and_change_back_is_no_change() {
        let mut t = ChangeTracker::default();
        t.upsert("a", 1);
        t.take();
        t.upsert("a", 2);
        assert_eq!(t.pending(), 1);
        t.upsert("a", 1);
        assert_eq!(t.pending(), 0);
        assert!(t.touched());
        assert!(t.take().is_empty());
    }

    #[test]
    fn add_then_delete_is_no_change_and_delete_reports_before() {
        let mut t = ChangeTracker::default();
        t.upsert("new", 1);
        t.delete(&"new");
        assert!(t.take().is_empty());
        t.upsert("old", 5);
        t.take();
        t.upsert("old", 6);
        t.delete(&"old");
        assert_eq!(t.take(), vec![("old", Some(5), None)]);
        assert_eq!(t.get(&"old"), None);
    }

    #[test]
    fn taking_releases_the_memory_of_the_pending_changes() {
        let mut t = ChangeTracker::default();
        for i in 0..10_000 {
            t.upsert(i, i);
        }
        assert_eq!(t.take_with(|_, _, _| {}), 10_000);
        assert_eq!(t.previous.capacity(), 0);
        t.upsert(1, 2);
        assert_eq!(t.take(), vec![(1, Some(1), Some(2))]);
    }

    #[test]
    fn deleting_an_unknown_key_records_nothing() {
        let mut t: ChangeTracker<&str, i32> = ChangeTracker::default();
        t.delete(&"ghost");
        assert_eq!(t.pending(), 0);
    }
}
