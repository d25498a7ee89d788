//! A `kproxy run` process on free loopback ports and its admin endpoints,
//! for the test binaries that start one (`run`, `surface`, `list_output`).
//! Each binary uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on 127.0.0.1:port: (status, body), or None if not answering.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)).ok()?;
    // `/state` plans the mode on each request: slow in a debug build.
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// The body of a 200 answer to `GET path`, or None.
pub fn get_ok(port: u16, path: &str) -> Option<String> {
    get(port, path).and_then(|(status, body)| (status == 200).then_some(body))
}

/// Polls until `check` holds, for at most 20 s.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// Polls `GET path` for at most 20 s until it answers 200: its body.
pub fn eventually_ok(port: u16, path: &str) -> String {
    let mut body = None;
    eventually(&format!("a 200 from {path} on port {port}"), || {
        body = get_ok(port, path);
        body.is_some()
    });
    body.expect("eventually returned")
}

/// Kills the child (by its own handle) when the test ends, pass or fail.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kproxy run ARGS` with health and metrics on free loopback ports:
/// (process, healthz port, metrics port). Pass `--dry-run` to never
/// program the test host's own namespace.
pub fn start(args: &[&str]) -> (Running, u16, u16) {
    let (healthz, metrics) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .arg("run")
        .args(args)
        .args(["--healthz-bind-address", &format!("127.0.0.1:{healthz}")])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Running(child), healthz, metrics)
}
