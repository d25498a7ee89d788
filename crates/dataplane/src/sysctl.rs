//! The one seam through which kproxy reads and writes the node's kernel
//! settings: sysctls under `/proc/sys`, module parameters under `/sys`, and
//! the mount table that says whether `/sys` is writable.
//!
//! [`KernelFiles::host`] is the real node; [`KernelFiles::under`] puts the
//! same layout under another directory, so tests exercise every rule
//! against a temporary folder and never touch the host's global settings.
//! This module decides nothing: what to set is the callers' business
//! (`conntrack_settings`, the IPVS and iptables modes).
//!
//! `/proc/sys/net/*` resolves against the network namespace of the calling
//! thread: a kproxy started inside a namespace reads and writes that
//! namespace's per-namespace sysctls.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A failed read or write of a kernel setting.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// The file could not be read (a sysctl that does not exist reads as
    /// `NotFound`: its module is not loaded).
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file could not be written.
    #[error("cannot write {value} to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    /// The file holds something other than one integer.
    #[error("{path} holds {text:?}, not an integer")]
    NotInteger { path: PathBuf, text: String },
}

impl SysctlError {
    /// The underlying I/O error, if any.
    pub fn io(&self) -> Option<&io::Error> {
        match self {
            SysctlError::Read { source, .. } | SysctlError::Write { source, .. } => Some(source),
            SysctlError::NotInteger { .. } => None,
        }
    }

    /// The error and its cause in one line, for a log field.
    pub fn chain(&self) -> String {
        match self.io() {
            Some(io) => format!("{self}: {io}"),
            None => self.to_string(),
        }
    }
}

/// What [`KernelFiles::ensure`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// The setting already had the value.
    Unchanged,
    /// Written; the value it had before (`None` when it could not be read).
    Changed { from: Option<String> },
}

/// Where the kernel's settings live: `/proc/sys`, `/sys` and the mount
/// table, or the same layout under a test's directory.
#[derive(Clone, Debug)]
pub struct KernelFiles {
    proc_sys: PathBuf,
    sys: PathBuf,
    mounts: PathBuf,
}

impl KernelFiles {
    /// The node's own: `/proc/sys`, `/sys`, `/proc/self/mounts`.
    pub fn host() -> KernelFiles {
        KernelFiles::under(Path::new("/"))
    }

    /// The same layout under `root`: `root/proc/sys`, `root/sys` and
    /// `root/proc/self/mounts`.
    pub fn under(root: &Path) -> KernelFiles {
        KernelFiles { proc_sys: root.join("proc/sys"), sys: root.join("sys"), mounts: root.join("proc/self/mounts") }
    }

    /// The path of sysctl `key` (`net/netfilter/nf_conntrack_max`).
    pub fn sysctl_path(&self, key: &str) -> PathBuf {
        self.proc_sys.join(key)
    }

    /// The path of `rel` under `/sys` (`module/nf_conntrack/parameters/hashsize`).
    pub fn sys_path(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }

    /// Sysctl `key`, trimmed.
    pub fn read(&self, key: &str) -> Result<String, SysctlError> {
        read_trimmed(&self.sysctl_path(key))
    }

    /// Sysctl `key` as an integer.
    pub fn read_int(&self, key: &str) -> Result<u64, SysctlError> {
        read_int(&self.sysctl_path(key))
    }

    /// Writes sysctl `key`.
    pub fn write(&self, key: &str, value: &str) -> Result<(), SysctlError> {
        write(&self.sysctl_path(key), value)
    }

    /// Writes sysctl `key` unless it already holds `value`.
    pub fn ensure(&self, key: &str, value: &str) -> Result<Ensured, SysctlError> {
        let from = self.read(key).ok();
        if from.as_deref() == Some(value) {
            return Ok(Ensured::Unchanged);
        }
        self.write(key, value)?;
        Ok(Ensured::Changed { from })
    }

    /// Whether the kernel offers sysctl `key` for writing at all. The
    /// kernel marks a sysctl read-only (mode 0444) where it may not be
    /// changed: `nf_conntrack_max` outside the initial network namespace.
    /// `None` when the sysctl does not exist.
    pub fn writable(&self, key: &str) -> Option<bool> {
        let meta = std::fs::metadata(self.sysctl_path(key)).ok()?;
        Some(meta.permissions().mode() & 0o222 != 0)
    }

    /// `rel` under `/sys` as an integer.
    pub fn read_sys_int(&self, rel: &str) -> Result<u64, SysctlError> {
        read_int(&self.sys_path(rel))
    }

    /// Writes `rel` under `/sys`.
    pub fn write_sys(&self, rel: &str, value: &str) -> Result<(), SysctlError> {
        write(&self.sys_path(rel), value)
    }

    /// Whether sysfs is mounted read-only, from the first `sysfs` entry of
    /// the mount table (as upstream checks it); `None` when the table
    /// cannot be read or lists no sysfs.
    pub fn sysfs_read_only(&self) -> Option<bool> {
        let table = std::fs::read_to_string(&self.mounts).ok()?;
        table.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // device mountpoint type options dump pass
            match fields.as_slice() {
                [_, _, "sysfs", options, ..] => Some(options.split(',').next() != Some("rw")),
                _ => None,
            }
        })
    }

    /// The node's online CPUs (`/sys/devices/system/cpu/online`, ranges
    /// like `0-3,8-11`). The conntrack limit is node-wide, so this counts
    /// the node's CPUs, not the ones this process may run on.
    pub fn online_cpus(&self) -> Option<usize> {
        let text = std::fs::read_to_string(self.sys_path("devices/system/cpu/online")).ok()?;
        let mut count = 0;
        for range in text.trim().split(',').filter(|r| !r.is_empty()) {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
            count += last.checked_sub(first)? + 1;
        }
        (count > 0).then_some(count)
    }
}

fn read_trimmed(path: &Path) -> Result<String, SysctlError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(source) => Err(SysctlError::Read { path: path.to_owned(), source }),
    }
}

fn read_int(path: &Path) -> Result<u64, SysctlError> {
    let text = read_trimmed(path)?;
    text.parse().map_err(|_| SysctlError::NotInteger { path: path.to_owned(), text })
}

fn write(path: &Path, value: &str) -> Result<(), SysctlError> {
    std::fs::write(path, value).map_err(|source| SysctlError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("a temporary folder");
        for (rel, text) in files {
            let path = root.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("folders");
            std::fs::write(path, text).expect("a file");
        }
        root
    }

    #[test]
    fn ensure_writes_only_a_different_value_and_reports_the_old_one() {
        let root = root_with(&[("proc/sys/net/netfilter/nf_conntrack_udp_timeout", "30\n")]);
        let files = KernelFiles::under(root.path());
        let key = "net/netfilter/nf_conntrack_udp_timeout";
        assert_eq!(files.ensure(key, "30").expect("ensure"), Ensured::Unchanged);
        assert_eq!(files.ensure(key, "45").expect("ensure"), Ensured::Changed { from: Some("30".into()) });
        assert_eq!(files.read_int(key).expect("read"), 45);
    }

    #[test]
    fn a_missing_sysctl_is_a_read_error_naming_its_path() {
        let root = root_with(&[]);
        let err = KernelFiles::under(root.path()).read_int("net/netfilter/nf_conntrack_max").expect_err("missing");
        assert!(err.to_string().ends_with("proc/sys/net/netfilter/nf_conntrack_max"), "{err}");
        assert_eq!(err.io().map(io::Error::kind), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn a_mode_0444_sysctl_is_not_writable() {
        let root = root_with(&[("proc/sys/net/netfilter/nf_conntrack_max", "262144")]);
        let files = KernelFiles::under(root.path());
        let path = files.sysctl_path("net/netfilter/nf_conntrack_max");
        assert_eq!(files.writable("net/netfilter/nf_conntrack_max"), Some(true));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        assert_eq!(files.writable("net/netfilter/nf_conntrack_max"), Some(false));
        assert_eq!(files.writable("net/netfilter/nf_conntrack_buckets"), None);
    }

    #[test]
    fn sysfs_is_read_only_when_its_first_mount_option_is_not_rw() {
        let ro = root_with(&[("proc/self/mounts", "proc /proc proc rw 0 0\nsysfs /sys sysfs ro,nosuid 0 0\n")]);
        assert_eq!(KernelFiles::under(ro.path()).sysfs_read_only(), Some(true));
        let rw = root_with(&[("proc/self/mounts", "sysfs /sys sysfs rw,relatime 0 0\nsysfs /x sysfs ro 0 0\n")]);
        assert_eq!(KernelFiles::under(rw.path()).sysfs_read_only(), Some(false));
        let none = root_with(&[("proc/self/mounts", "proc /proc proc rw 0 0\n")]);
        assert_eq!(KernelFiles::under(none.path()).sysfs_read_only(), None);
    }

    #[test]
    fn online_cpus_counts_every_range() {
        for (online, want) in [("0\n", Some(1)), ("0-1\n", Some(2)), ("0-3,8-11\n", Some(8)), ("3-1", None), ("", None)]
        {
            let root = root_with(&[("sys/devices/system/cpu/online", online)]);
            assert_eq!(KernelFiles::under(root.path()).online_cpus(), want, "{online:?}");
        }
    }
}
