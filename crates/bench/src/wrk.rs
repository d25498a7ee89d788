//! `wrk` runs: a fixed duration against one URL, keep-alive or with
//! `Connection: close` (a new TCP connection per request), read back
//! through wrk's Lua `done()` hook, which prints requests, errors and
//! latency percentiles (p99.9 included) on one line.
//!
//! wrk's latency runs from a request's first byte written to its reply
//! parsed; with `Connection: close` the client's own connect is not in it,
//! but everything the proxy does for the new connection (accept, connect
//! to an endpoint, relay) is.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The `done()` hook; all values in wrk's units (µs, counts).
pub const SCRIPT: &str = r#"-- written by kproxy-bench: one line of numbers for the harness
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("kproxy-bench-wrk %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n",
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
"#;

/// What one wrk run measured; latencies in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    pub seconds: f64,
    pub requests: u64,
    /// Connect, read, write, non-2xx and timeout errors together.
    pub errors: u64,
    pub p50_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
}

impl Run {
    pub fn rps(&self) -> f64 {
        if self.seconds > 0.0 { self.requests as f64 / self.seconds } else { 0.0 }
    }
}

/// How wrk loads the target.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub threads: usize,
    pub connections: usize,
    pub seconds: f64,
    /// `Connection: close` on every request.
    pub close: bool,
}

/// Runs `wrk` (the binary) with `script` against `url`; ends it, as its
/// parent, if it overruns its duration by 30 s.
pub fn run(wrk: &Path, script: &Path, url: &str, load: Load) -> anyhow::Result<Run> {
    let mut command = Command::new(wrk);
    command
        .args(["-t", &load.threads.to_string(), "-c", &load.connections.to_string()])
        .args(["-d", &format!("{}s", load.seconds.ceil().max(1.0) as u64), "--timeout", "5s", "-s"])
        .arg(script);
    if load.close {
        command.args(["-H", "Connection: close"]);
    }
    command.arg(url).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("starting {}", wrk.display()))?;
    let deadline = Instant::now() + Duration::from_secs_f64(load.seconds + 30.0);
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            // Our own child, not yet reaped: killing it by its handle is safe.
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("wrk ran 30 s past its duration");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // wrk prints a few hundred bytes: the pipes cannot have filled up.
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "wrk failed ({}): {}{}",
        out.status,
        stdout.trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    parse(&stdout).with_context(|| format!("reading wrk's output {stdout:?}"))
}

/// The `done()` line of wrk's output.
pub fn parse(output: &str) -> anyhow::Result<Run> {
    let line = output.lines().find_map(|l| l.strip_prefix("kproxy-bench-wrk ")).context("no kproxy-bench-wrk line")?;
    let values: Vec<f64> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    let &[duration_us, requests, connect, read, write, status, timeout, p50, p99, p999, max] = values.as_slice() else {
        anyhow::bail!("expected 11 numbers, got {}", values.len());
    };
    Ok(Run {
        seconds: duration_us / 1e6,
        requests: requests as u64,
        errors: (connect + read + write + status + timeout) as u64,
        p50_s: p50 / 1e6,
        p99_s: p99 / 1e6,
        p999_s: p999 / 1e6,
        max_s: max / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_done_line() {
        let output = "Running 5s test @ http://127.0.33.1:8080/\n  2 threads and 64 connections\n\
                      kproxy-bench-wrk 5000000 250000 0 2 0 1 0 210 900 2500 12000\n";
        let run = parse(output).expect("parsed");
        assert_eq!(run.requests, 250_000);
        assert_eq!(run.errors, 3);
        assert!((run.rps() - 50_000.0).abs() < 1e-6);
        assert!((run.p999_s - 0.0025).abs() < 1e-12);
        assert!(parse("Running 5s test\n").is_err());
        assert!(parse("kproxy-bench-wrk 1 2 3\n").is_err());
    }
}
