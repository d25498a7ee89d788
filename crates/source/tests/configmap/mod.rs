//! A ConfigMap volume, updated as the kubelet's atomic writer does it
//! (`pkg/volume/util/atomic_writer.go`, `AtomicWriter.Write`):
//!
//! 1. the files are written into a new hidden directory named for the time
//!    (`..2026_01_15_10_20_30.` plus a random suffix, as Go's `TempDir`);
//! 2. each new top-level name is linked through `..data`
//!    (`config.yaml -> ..data/config.yaml`), dangling until step 3;
//! 3. `..data_tmp` is linked to the new directory and renamed over `..data`
//!    (the one atomic step);
//! 4. top-level names no longer in the payload are removed (dangling
//!    between 3 and 4);
//! 5. the previous directory is removed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub struct Volume {
    dir: PathBuf,
}

impl Volume {
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_owned() }
    }

    pub fn project(&mut self, payload: &[(&str, &str)]) {
        self.project_with(payload, |_| {});
    }

    /// Updates the volume to hold exactly `payload` (file name, content);
    /// `between` runs after each step, named.
    pub fn project_with(&mut self, payload: &[(&str, &str)], mut between: impl FnMut(&str)) {
        let data = self.dir.join("..data");
        let old = std::fs::read_link(&data).ok().map(|old| self.dir.join(old));
        let old_names: BTreeSet<String> = old.iter().flat_map(|old| names(old)).collect();

        let new = tempfile::Builder::new().prefix("..2026_01_15_10_20_30.").tempdir_in(&self.dir).unwrap().keep();
        for (name, content) in payload {
            std::fs::write(new.join(name), content).unwrap();
        }
        between("written");
        for (name, _) in payload {
            let visible = self.dir.join(name);
            if std::fs::symlink_metadata(&visible).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), visible).unwrap();
            }
        }
        between("linked");
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(new.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, &data).unwrap();
        between("swapped");
        let kept: BTreeSet<&str> = payload.iter().map(|(name, _)| *name).collect();
        for name in old_names.iter().filter(|n| !kept.contains(n.as_str())) {
            std::fs::remove_file(self.dir.join(name)).unwrap();
        }
        between("pruned");
        if let Some(old) = old {
            std::fs::remove_dir_all(old).unwrap();
        }
        between("cleaned");
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}
