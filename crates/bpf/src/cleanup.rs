//! `kproxy cleanup` for the ebpf mode: detach and unpin every link kproxy
//! pinned, unpin its maps (the programs and maps are freed with their last
//! reference), and remove its cls_bpf filters (kernels without tcx).
//! Only names kproxy makes are touched; running it twice is fine.

use std::os::fd::AsFd;
use std::path::Path;

use aya::programs::TcAttachType;

use crate::attach::remove_cls_bpf;
use crate::error::BpfError;
use crate::{maps, programs, sys};

/// What [`cleanup`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Pinned links, detached and unpinned.
    pub links: usize,
    /// Pinned maps.
    pub maps: usize,
    /// cls_bpf filters (kernels without tcx).
    pub filters: usize,
}

/// Remove everything kproxy pinned under `pin_dir` (and `pin_dir` itself
/// when that leaves it empty), and kproxy's cls_bpf filters in the
/// current network namespace.
pub fn cleanup(pin_dir: &Path) -> Result<Removed, BpfError> {
    let mut removed = cleanup_pins(pin_dir)?;
    // Whatever the kernel has now: looking costs one netlink dump per
    // interface, and a filter of ours left behind would keep NATing.
    removed.filters = remove_filters()?;
    Ok(removed)
}

/// The pinned part of [`cleanup`]: links and maps under `pin_dir`.
pub(crate) fn cleanup_pins(pin_dir: &Path) -> Result<Removed, BpfError> {
    let mut removed = Removed::default();
    let dir_err = |source| BpfError::PinDir { path: pin_dir.into(), source };
    let entries = match std::fs::read_dir(pin_dir) {
        Ok(entries) => entries.collect::<Result<Vec<_>, _>>().map_err(dir_err)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(dir_err(e)),
    };
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let pin_err = |source| BpfError::Pin { path: path.clone(), source };
        if name.starts_with("link_") {
            // Detach first: a process still holding the link open would
            // otherwise keep it attached after the pin is gone.
            if let Ok(link) = sys::obj_get(&path) {
                let _ = sys::link_detach(link.as_fd());
            }
            std::fs::remove_file(&path).map_err(pin_err)?;
            removed.links += 1;
        } else if maps::ALL.contains(&name.as_str()) {
            std::fs::remove_file(&path).map_err(pin_err)?;
            removed.maps += 1;
        }
    }
    match std::fs::remove_dir(pin_dir) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTEMPTY)) => {}
        Err(e) => return Err(dir_err(e)),
    }
    Ok(removed)
}

fn remove_filters() -> Result<usize, BpfError> {
    let interfaces = sys::interfaces().map_err(|source| BpfError::Detach { interface: "*".into(), source })?;
    let mut count = 0;
    for interface in interfaces {
        for (name, kind) in [(programs::TC_INGRESS, TcAttachType::Ingress), (programs::TC_EGRESS, TcAttachType::Egress)]
        {
            match remove_cls_bpf(&interface, name, kind) {
                Ok(true) => count += 1,
                Ok(false) => {}
                // No clsact qdisc on this interface: nothing of ours.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {}
                Err(source) => return Err(BpfError::Detach { interface, source }),
            }
        }
    }
    Ok(count)
}
