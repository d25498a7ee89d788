//! A private BPF file system for one test: mounted on a directory the test
//! owns (never `/sys/fs/bpf`) and unmounted on drop, which releases every
//! link and map pinned in it once no process holds them.

use std::path::{Path, PathBuf};

use crate::{SandboxError, command};

/// A `bpf` file system mounted at a directory this value created.
#[derive(Debug)]
pub struct Bpffs {
    mount_point: PathBuf,
}

impl Bpffs {
    /// Creates `mount_point` (it must not exist) and mounts a fresh bpffs on it.
    pub fn mount(mount_point: &Path) -> Result<Bpffs, SandboxError> {
        std::fs::create_dir(mount_point).map_err(|source| SandboxError::Bpffs {
            step: "create the mount point",
            path: mount_point.to_owned(),
            source,
        })?;
        let point = mount_point.display().to_string();
        if let Err(error) = command::run(command::new("mount", ["-t", "bpf", "bpf", point.as_str()])) {
            let _ = std::fs::remove_dir(mount_point);
            return Err(error);
        }
        tracing::debug!(bpffs = %point, "mounted a test bpffs");
        Ok(Bpffs { mount_point: mount_point.to_owned() })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Creates a directory `name` inside the file system and returns its path.
    pub fn dir(&self, name: &str) -> Result<PathBuf, SandboxError> {
        let path = self.mount_point.join(name);
        std::fs::create_dir(&path).map_err(|source| SandboxError::Bpffs {
            step: "create a directory in the bpffs",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let point = self.mount_point.display().to_string();
        // Unmounting drops the pins; what they held goes once no process holds it either.
        match command::run(command::new("umount", [point.as_str()])) {
            Ok(_) => {
                let _ = std::fs::remove_dir(&self.mount_point);
            }
            Err(error) => tracing::warn!(bpffs = %point, error = %error, "could not unmount a test bpffs"),
        }
    }
}
