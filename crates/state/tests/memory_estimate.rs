//! `StateBuilder::memory`: the estimate follows what the builder holds,
//! and is close to the heap it really uses (counted by this test binary's
//! allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kproxy_state::{Kind, Memory};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Services `from..to`, each with one slice of `endpoints` endpoints on
/// ten nodes, as the benchmark's workload has them.
fn add(s: &mut Scenario, from: usize, to: usize, part: &str, endpoints: usize) {
    for i in from..to {
        let (ns, name) = (format!("ns-{}", i % 10), format!("svc-{i}"));
        let ip = format!("10.{}.{}.{}", 96 + i / 65536, i / 256 % 256, i % 256);
        s.service(service(&ns, &name).cluster_ip(&ip).port("http", "TCP", 80).build());
        let mut b = slice(&ns, &format!("{name}-{part}"), &name).port("http", "TCP", 8080);
        for e in 0..endpoints {
            let ep =
                format!("10.{}.{}.{}", 128 + i / 4096, i / 16 % 256, (i % 16) * 16 + e + usize::from(part == "b") * 10);
            b = b.endpoint(Ep::new(&ep).node(&format!("node-{e}")));
        }
        s.slice(b.build());
    }
}

#[test]
fn the_estimate_grows_and_shrinks_with_endpoints() {
    let mut s = Scenario::cluster();
    add(&mut s, 0, 200, "a", 5);
    s.sync();
    let before = s.builder.memory();
    assert_eq!((before.counts.services, before.counts.slices, before.counts.endpoints), (200, 200, 1000));
    assert_eq!(before.counts.service_ports, 200);

    // A second slice of five more endpoints per service.
    add(&mut s, 0, 200, "b", 5);
    s.sync();
    let more = s.builder.memory();
    assert_eq!((more.counts.slices, more.counts.endpoints), (400, 2000));
    let added = 1000;
    assert!(more.endpoints - before.endpoints >= added * 48, "{before:?} -> {more:?}");
    // Each endpoint is in the state's cluster endpoints too.
    assert!(more.state - before.state >= added * size_of::<kproxy_model::Endpoint>(), "{before:?} -> {more:?}");
    assert_eq!(more.services, before.services, "the services did not change");

    for i in 0..200 {
        s.delete(Kind::EndpointSlice, &format!("ns-{}", i % 10), &format!("svc-{i}-b"));
    }
    s.sync();
    let after = s.builder.memory();
    assert_eq!((after.counts.slices, after.counts.endpoints), (200, 1000));
    assert!(after.endpoints < more.endpoints && after.state < more.state, "{more:?} -> {after:?}");
}

/// Within a factor of 1.5 either way of the bytes really allocated
/// (allocator overhead and fragmentation are outside both).
#[test]
fn the_estimate_is_close_to_the_measured_heap() {
    let base = LIVE.load(Ordering::Relaxed);
    let mut s = Scenario::cluster();
    add(&mut s, 0, 2000, "a", 10);
    drop(s.sync());
    let measured = LIVE.load(Ordering::Relaxed) - base;
    let estimate: Memory = s.builder.memory();
    let ratio = estimate.total() as f64 / measured as f64;
    assert!(
        (1.0 / 1.5..=1.5).contains(&ratio),
        "estimate {estimate:?}, total {}, measured {measured}",
        estimate.total()
    );
}
