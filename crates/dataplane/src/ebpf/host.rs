//! The host facts the ebpf mode needs before it loads anything: where the
//! cgroup v2 hierarchy is mounted (the default `--ebpf-cgroup`), and a
//! bpffs under the pin directory (mounted at `/sys/fs/bpf` when that is
//! where the pins go and nothing is mounted there yet, as Cilium does).

use std::path::{Path, PathBuf};

/// The conventional bpffs mount point.
const BPF_FS: &str = "/sys/fs/bpf";

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("reading /proc/self/mountinfo")]
    Mountinfo(#[source] std::io::Error),
    #[error("no cgroup v2 hierarchy is mounted (none in /proc/self/mountinfo); pass --ebpf-cgroup")]
    NoCgroup2,
    #[error("{path} is not in a bpffs: mount one there (mount -t bpf bpf {path}) or pass --ebpf-pin-dir inside one")]
    NoBpffs { path: String },
    #[error("mounting a bpffs on {BPF_FS}")]
    Mount(#[source] std::io::Error),
    #[error("creating the pin directory {path}")]
    PinDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The mount point of the cgroup v2 hierarchy (`/sys/fs/cgroup` on a
/// unified host, `/sys/fs/cgroup/unified` on a hybrid one).
pub fn cgroup2_root() -> Result<PathBuf, HostError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(HostError::Mountinfo)?;
    cgroup2_in(&text).ok_or(HostError::NoCgroup2)
}

/// The first cgroup2 mount point in a mountinfo text.
fn cgroup2_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let mount_point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(mount_point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let digits: String = chars.clone().take(3).collect();
            if let Ok(byte) = u8::from_str_radix(&digits, 8)
                && digits.len() == 3
            {
                out.push(char::from(byte));
                chars.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// Makes sure `pin_dir` exists inside a bpffs: its parent must be one;
/// when the parent is `/sys/fs/bpf` and holds no bpffs yet, one is mounted
/// there.
pub fn ensure_pin_dir(pin_dir: &Path) -> Result<(), HostError> {
    let parent = pin_dir.parent().unwrap_or(Path::new("/"));
    if !is_bpffs(parent) {
        if parent != Path::new(BPF_FS) {
            return Err(HostError::NoBpffs { path: parent.display().to_string() });
        }
        std::fs::create_dir_all(parent).map_err(HostError::Mount)?;
        nix::mount::mount(Some("bpf"), parent, Some("bpf"), nix::mount::MsFlags::empty(), None::<&str>)
            .map_err(|e| HostError::Mount(e.into()))?;
    }
    std::fs::create_dir_all(pin_dir).map_err(|source| HostError::PinDir { path: pin_dir.display().to_string(), source })
}

/// Whether `path` is on a bpffs (the loader's check).
pub fn is_bpffs(path: &Path) -> bool {
    kproxy_bpf::is_bpffs(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_on_hybrid_and_unified_hosts() {
        let hybrid = "25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
                      31 25 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755\n\
                      32 31 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw,nsdelegate\n\
                      33 31 0:28 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,name=systemd\n";
        assert_eq!(cgroup2_in(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let unified = "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_in(unified), Some(PathBuf::from("/sys/fs/cgroup")));
        let optional_fields = "35 24 0:30 / /my\\040cgroups rw shared:9 master:2 - cgroup2 none rw\n";
        assert_eq!(cgroup2_in(optional_fields), Some(PathBuf::from("/my cgroups")));
        assert_eq!(cgroup2_in("25 30 0:22 / /sys rw - sysfs sysfs rw\n"), None);
    }

    #[test]
    fn a_pin_directory_outside_a_bpffs_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let pins = dir.path().join("kproxy");
        let error = ensure_pin_dir(&pins).expect_err("a tmpfs is no bpffs");
        assert!(error.to_string().contains(&dir.path().display().to_string()), "{error}");
        assert!(!pins.exists());
    }
}
