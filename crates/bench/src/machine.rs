//! The machine a run happened on, read from `/proc` and `nft --version`.

use std::process::Command;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub nft: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let nft =
            Command::new("nft").arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        Machine {
            cpu: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: memory_kib(&meminfo).map_or(0.0, |kib| kib as f64 / 1024.0 / 1024.0),
            kernel: format!("Linux {} {}", release.trim(), std::env::consts::ARCH),
            nft: nft.map(|v| v.trim().to_owned()).unwrap_or_else(|_| "nft not found".into()),
        }
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    let line = cpuinfo.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_owned())
}

fn memory_kib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_and_memory() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(memory_kib("MemTotal:       24683520 kB\nMemFree: 1 kB\n"), Some(24_683_520));
        assert_eq!(cpu_model(""), None);
    }
}
