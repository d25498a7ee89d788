//! `process_*` metrics, read from `/proc` at every scrape, with the names
//! and meanings of Prometheus' process collector (which upstream's
//! component-base registers): CPU seconds, resident and virtual memory,
//! open and maximum file descriptors, and the start time.
//!
//! What cannot be read is left out of that scrape, never reported as 0.

use std::path::PathBuf;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The process's figures at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

/// Reads one process's figures from a proc filesystem.
#[derive(Clone, Debug)]
pub struct ProcessCollector {
    /// The proc filesystem's root (`/proc`; a folder in tests).
    proc_root: PathBuf,
    /// `self`, or a PID.
    pid: String,
    clock_ticks: f64,
    page_size: f64,
}

impl ProcessCollector {
    /// This process, from `/proc`.
    pub fn current() -> Self {
        // SAFETY: sysconf reads constants of the running system.
        let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
        Self::new("/proc".into(), "self", if ticks > 0 { ticks as f64 } else { 100.0 }, page.max(1) as f64)
    }

    /// Process `pid` of the proc filesystem at `proc_root`.
    pub fn new(proc_root: PathBuf, pid: &str, clock_ticks: f64, page_size: f64) -> Self {
        Self { proc_root, pid: pid.to_owned(), clock_ticks, page_size }
    }

    /// The figures now.
    pub fn read(&self) -> ProcessFigures {
        let dir = self.proc_root.join(&self.pid);
        let stat = std::fs::read_to_string(dir.join("stat")).ok();
        let stat = stat.as_deref().and_then(parse_stat);
        let boot = std::fs::read_to_string(self.proc_root.join("stat")).ok().and_then(|s| boot_time(&s));
        let limits = std::fs::read_to_string(dir.join("limits")).ok();
        ProcessFigures {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / self.clock_ticks),
            resident_bytes: stat.map(|s| s.rss_pages as f64 * self.page_size),
            virtual_bytes: stat.map(|s| s.vsize as f64),
            open_fds: std::fs::read_dir(dir.join("fd")).ok().map(|entries| entries.count() as f64),
            max_fds: limits.as_deref().and_then(max_open_files),
            start_time_seconds: stat.zip(boot).map(|(s, boot)| boot + s.start_ticks as f64 / self.clock_ticks),
        }
    }
}

/// The fields of `/proc/PID/stat` kproxy reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; proc(5) numbers from 1.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
fn boot_time(text: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

/// The soft limit of `Max open files` in `/proc/PID/limits`.
fn max_open_files(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    // "unlimited" has no number; Prometheus' collector reports nothing too.
    soft.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = self.read();
        if let Some(v) = figures.cpu_seconds {
            // Counters are encoded with their `_total` suffix.
            let counter = ConstCounter::new(v);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", figures.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", figures.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors.", figures.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors.", figures.max_fds),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                figures.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let gauge = ConstGauge::new(v);
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a real process, with a command name that has spaces
    // and a parenthesis.
    const STAT: &str = "4242 (kproxy (x) y) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 50 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 17642 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    fn fake_proc() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let me = dir.path().join("4242");
        std::fs::create_dir_all(me.join("fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(me.join("fd").join(fd), "").unwrap();
        }
        std::fs::write(me.join("stat"), STAT).unwrap();
        std::fs::write(
            me.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n",
        )
        .unwrap();
        std::fs::write(dir.path().join("stat"), "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap();
        dir
    }

    #[test]
    fn figures_come_from_stat_limits_and_the_fd_folder() {
        let dir = fake_proc();
        let figures = ProcessCollector::new(dir.path().into(), "4242", 100.0, 4096.0).read();
        assert_eq!(
            figures,
            ProcessFigures {
                cpu_seconds: Some(3.0),
                resident_bytes: Some(2048.0 * 4096.0),
                virtual_bytes: Some(123456789.0),
                open_fds: Some(3.0),
                max_fds: Some(1024.0),
                start_time_seconds: Some(1700000010.0),
            }
        );
    }

    #[test]
    fn what_cannot_be_read_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let figures = ProcessCollector::new(dir.path().into(), "1", 100.0, 4096.0).read();
        assert_eq!(figures, ProcessFigures::default());
        assert_eq!(max_open_files("Max open files            unlimited            unlimited            files\n"), None);
    }

    #[test]
    fn this_process_has_memory_and_open_files() {
        let figures = ProcessCollector::current().read();
        assert!(figures.resident_bytes.is_some_and(|b| b > 0.0), "{figures:?}");
        assert!(figures.open_fds.is_some_and(|n| n >= 1.0), "{figures:?}");
        assert!(figures.start_time_seconds.is_some_and(|t| t > 1.0e9), "{figures:?}");
    }
}
