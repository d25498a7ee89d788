//! The kernel's floor under a one-element change: one `nft -f` transaction
//! on a tiny table that does nothing, adds one map element, or deletes one.
//! Runs inside a worker's namespace, on a table of its own.
//!
//! The difference between "add" and "delete" is what the kernel itself
//! charges a transaction that removes an element, whoever sends it.

use std::time::Instant;

use anyhow::Context;
use kproxy_dataplane::nft;

use crate::jobs::Floor;

const TABLE: &str = "bench-floor";

/// `samples` rounds of (no-op, add one element, delete it).
pub async fn measure(samples: usize) -> anyhow::Result<Floor> {
    let map = "type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service ;";
    nft(&format!("add table ip {TABLE}\nadd map ip {TABLE} m {{ {map} }}\n")).await.context("creating the table")?;
    let mut floor = Floor::default();
    for k in 0..samples {
        let key = format!("10.{}.{}.{} . tcp . 80", k / 65536 % 256, k / 256 % 256, k % 256);
        let steps = [
            (format!("add table ip {TABLE}\n"), &mut floor.noop_s),
            (format!("add element ip {TABLE} m {{ {key} : 10.200.0.1 . 8080 }}\n"), &mut floor.add_s),
            (format!("delete element ip {TABLE} m {{ {key} }}\n"), &mut floor.delete_s),
        ];
        for (script, samples) in steps {
            let start = Instant::now();
            nft(&script).await.context("a floor transaction")?;
            samples.push(start.elapsed().as_secs_f64());
        }
    }
    Ok(floor)
}
