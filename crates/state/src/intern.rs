//! Interned strings: one allocation per distinct namespace, service name,
//! node name, zone or port name, however many records carry it.
//!
//! Conversion (`crate::convert`) runs in the source tasks, so the table is
//! process-wide and shared by every source. A string no record uses any
//! more is freed: each time the table has doubled since the last sweep, the
//! entries only the table itself still holds are dropped, so it never holds
//! more than about as many dead strings as live ones and a sweep costs
//! amortised O(1) per interned string.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// Sweeps never run below this many entries: small tables are not worth it.
const MIN_SWEEP: usize = 1024;

struct Table {
    strings: HashSet<Arc<str>>,
    /// Sweep when the table reaches this size.
    sweep_at: usize,
    /// [`heap_str`] of every string in the table, kept as strings come and
    /// go: the state's memory gauge asks after every sync, under the lock
    /// every source's conversion takes.
    text_bytes: usize,
}

static TABLE: LazyLock<Mutex<Table>> =
    LazyLock::new(|| Mutex::new(Table { strings: HashSet::new(), sweep_at: MIN_SWEEP, text_bytes: 0 }));

/// The shared copy of `text`.
pub fn intern(text: &str) -> Arc<str> {
    // The table holds no invariant a panic could break half-way.
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = table.strings.get(text) {
        return Arc::clone(shared);
    }
    let shared: Arc<str> = Arc::from(text);
    table.strings.insert(Arc::clone(&shared));
    table.text_bytes += heap_str(text.len());
    if table.strings.len() >= table.sweep_at {
        sweep(&mut table);
    }
    shared
}

/// [`intern`] for an optional string.
pub fn intern_opt(text: Option<&str>) -> Option<Arc<str>> {
    text.map(intern)
}

fn sweep(table: &mut Table) {
    let mut freed = 0;
    table.strings.retain(|s| {
        let live = Arc::strong_count(s) > 1;
        if !live {
            freed += heap_str(s.len());
        }
        live
    });
    table.text_bytes -= freed;
    table.strings.shrink_to_fit();
    table.sweep_at = (table.strings.len() * 2).max(MIN_SWEEP);
}

/// Distinct strings in the table and their estimated heap bytes (text and
/// table slots; dead strings not yet swept included).
pub fn interned() -> (usize, usize) {
    let table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    (table.strings.len(), table.text_bytes + table.strings.capacity() * (size_of::<Arc<str>>() + 1))
}

/// Heap bytes of an `Arc<str>` of `len` bytes: two counters and the text.
pub(crate) fn heap_str(len: usize) -> usize {
    2 * size_of::<usize>() + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_allocation() {
        let a = intern("ns-intern-test");
        let b = intern(&String::from("ns-intern-test"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &intern("ns-intern-other")));
    }

    #[test]
    fn strings_no_record_uses_are_freed_by_a_later_sweep() {
        let kept = intern("kept-by-a-record");
        let weak = Arc::downgrade(&intern("dropped-by-every-record"));
        // Enough new strings to trigger at least one sweep, whatever the
        // table held before (tests share it).
        let before = interned().0;
        let filler: Vec<Arc<str>> = (0..before * 2 + 2 * MIN_SWEEP).map(|i| intern(&format!("filler-{i}"))).collect();
        assert!(weak.upgrade().is_none(), "an unused string survived the sweep");
        assert!(Arc::ptr_eq(&kept, &intern("kept-by-a-record")));
        drop(filler);
    }

    #[test]
    fn the_byte_total_is_kept_exactly_through_inserts_and_sweeps() {
        let recount = || {
            let table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
            (table.text_bytes, table.strings.iter().map(|s| heap_str(s.len())).sum::<usize>())
        };
        let kept: Vec<Arc<str>> = (0..MIN_SWEEP).map(|i| intern(&format!("kept-total-{i}"))).collect();
        let (kept_total, sum) = recount();
        assert_eq!(kept_total, sum);
        // Dropped at once: the next sweep frees them and their bytes.
        for i in 0..3 * MIN_SWEEP + interned().0 {
            drop(intern(&format!("dropped-total-{i}")));
        }
        let (after, sum) = recount();
        assert_eq!(after, sum);
        assert!(after < kept_total + 3 * MIN_SWEEP * heap_str("dropped-total-0000".len()), "nothing was swept");
        drop(kept);
    }
}
