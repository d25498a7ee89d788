//! The harness side of a job: a fresh `kp-` network namespace per run, the
//! worker started inside it, its answer read back, the namespace deleted.
//! Every wait is bounded; only processes started here are ever killed.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_sandbox::Netns;

use crate::jobs::{HOST_NETNS_ENV, Job, Outcome, current_netns};

/// How runs are repeated.
#[derive(Clone, Debug)]
pub struct Harness {
    /// This binary, started again as the worker.
    pub exe: PathBuf,
    pub host_netns: String,
    /// Runs per measurement.
    pub reps: usize,
    /// How long one measurement's runs may take together (see [`Harness::repeat`]).
    pub cell_budget: Duration,
    /// Longest a single worker may take.
    pub job_timeout: Duration,
}

impl Harness {
    pub fn new(reps: usize, cell_budget: Duration, job_timeout: Duration) -> anyhow::Result<Harness> {
        Ok(Harness {
            exe: std::env::current_exe().context("finding this binary")?,
            host_netns: current_netns()?,
            reps,
            cell_budget,
            job_timeout,
        })
    }

    /// Runs `job` in a namespace of its own.
    pub fn run(&self, job: &Job) -> anyhow::Result<Outcome> {
        let ns = Netns::new("bench").context("creating a network namespace")?;
        self.run_in(&ns, job)
    }

    /// Runs `job` in `ns` (which the caller owns and deletes).
    pub fn run_in(&self, ns: &Netns, job: &Job) -> anyhow::Result<Outcome> {
        let mut command = Command::new(&self.exe);
        command
            .arg("worker")
            .arg(serde_json::to_string(job)?)
            .env(HOST_NETNS_ENV, &self.host_netns)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut worker = ns.spawn(command).with_context(|| format!("starting the worker for {}", job.label()))?;
        let mut stdout = worker.stdout.take().context("the worker's stdout was piped")?;
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).map(|_| text)
        });
        let status = worker.wait_with_timeout(self.job_timeout)?;
        let Some(status) = status else {
            // Our own child, not yet reaped: killing it by its handle is safe.
            worker.kill()?;
            anyhow::bail!("{} took longer than {:?}", job.label(), self.job_timeout);
        };
        let text = reader.join().map_err(|_| anyhow::anyhow!("the reader thread panicked"))??;
        anyhow::ensure!(status.success(), "{} failed ({status})", job.label());
        let line = text.lines().last().context("the worker printed nothing")?;
        serde_json::from_str(line).with_context(|| format!("parsing the worker's answer {line:?}"))
    }

    /// Repeats `run` up to `reps` times. After `min_runs`, a run is made
    /// only if it is expected (at the runs' average so far) to end within
    /// `cell_budget`: slow measurements get fewer runs, and the report
    /// says how many each number stands for.
    pub fn repeat<T>(
        &self,
        what: &str,
        min_runs: usize,
        mut run: impl FnMut() -> anyhow::Result<T>,
    ) -> anyhow::Result<Vec<T>> {
        let start = Instant::now();
        let mut out = Vec::new();
        for r in 0..self.reps {
            let elapsed = start.elapsed();
            if r >= min_runs.max(1) && elapsed + elapsed / u32::try_from(r).unwrap_or(1) > self.cell_budget {
                eprintln!("==> {what}: {r} runs (the next would pass the {:?} budget)", self.cell_budget);
                break;
            }
            let t = Instant::now();
            out.push(run().with_context(|| format!("{what}, run {}", r + 1))?);
            eprintln!("==> {what}: run {}/{} took {:.1} s", r + 1, self.reps, t.elapsed().as_secs_f64());
        }
        Ok(out)
    }
}
