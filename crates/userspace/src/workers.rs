//! Relay threads: one single-threaded tokio runtime per core, each with its
//! own listening socket per TCP frontend (`SO_REUSEPORT`, so the kernel
//! spreads new connections over them). A connection lives on the thread
//! that accepted it from accept to close: no task moves between threads
//! and no thread wakes another for it, as in HAProxy's or nginx's
//! thread-per-core model. (A shared multi-thread runtime spent a good share
//! of each request waking and stealing across threads.)

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The relay threads; dropping this stops them, closing the connections
/// they carry.
pub struct Workers {
    handles: Vec<Handle>,
    /// Stops a thread's runtime when sent to or dropped.
    _stops: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// `count` threads (0: one per core).
    pub fn start(count: usize) -> std::io::Result<Workers> {
        let count = match count {
            0 => thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        let mut handles = Vec::with_capacity(count);
        let mut stops = Vec::with_capacity(count);
        for i in 0..count {
            let (handle_tx, handle_rx) = mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            thread::Builder::new().name(format!("kproxy-relay-{i}")).spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Runs the thread's tasks until told to stop (or the sender
                // is dropped); dropping the runtime then cancels them.
                runtime.block_on(async {
                    tokio::select! {
                        _ = stop_rx => {}
                        () = heartbeat() => {}
                    }
                });
            })?;
            let handle = handle_rx.recv().map_err(|_| std::io::Error::other("a relay thread died at start"))??;
            handles.push(handle);
            stops.push(stop_tx);
        }
        Ok(Workers { handles, _stops: stops })
    }

    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }
}

/// How often an idle relay thread wakes up anyway.
const HEARTBEAT: Duration = Duration::from_millis(500);

/// Keeps a timer due within [`HEARTBEAT`]. tokio wakes a parked thread's
/// driver (an eventfd write) whenever a timer is set earlier than every
/// timer it already had; without a near one, each connection's connect
/// timeout would cost that write. Two wakeups a second per thread instead.
async fn heartbeat() {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_runs_tasks_on_its_own_thread() {
        let workers = Workers::start(2).unwrap();
        let names: Vec<String> = workers
            .handles()
            .iter()
            .map(|h| {
                let (tx, rx) = mpsc::channel();
                h.spawn(async move { tx.send(thread::current().name().map(String::from)).unwrap() });
                rx.recv().unwrap().unwrap()
            })
            .collect();
        assert_eq!(names, ["kproxy-relay-0", "kproxy-relay-1"]);
    }

    #[test]
    fn dropping_the_workers_stops_their_tasks() {
        let workers = Workers::start(1).unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        workers.handles()[0].spawn(async move {
            let _alive = tx;
            std::future::pending::<()>().await;
        });
        drop(workers);
        // The task's sender is dropped with the runtime: recv sees the end.
        let end = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(end, Err(mpsc::RecvTimeoutError::Disconnected));
    }
}
