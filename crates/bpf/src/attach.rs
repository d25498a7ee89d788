//! Attaching the programs: the socket programs to a cgroup, the tc
//! programs to interfaces. Every attachment is a bpf_link pinned under the
//! pin directory, so it outlives kproxy; attaching again (a restart)
//! re-points the pinned link at the newly loaded program in one syscall
//! (no moment without a program, no duplicate), or replaces the link when
//! it points at another cgroup or interface. On kernels without tcx (before
//! 6.6) the tc programs are cls_bpf direct-action filters instead, which
//! cannot be pinned: the old filters are removed by name before adding.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, LinkOrder};
use aya::programs::tc::{self, NlOptions, TcAttachOptions};
use aya::programs::{CgroupAttachMode, CgroupSockAddr, SchedClassifier, TcAttachType};
use aya::util::KernelVersion;

use crate::datapath::{Datapath, program_mut};
use crate::error::{BpfError, io_of};
use crate::{programs, sys};

/// The pinned link of a cgroup program.
pub(crate) fn cgroup_link_pin(pin_dir: &Path, program: &str) -> PathBuf {
    pin_dir.join(format!("link_{program}"))
}

/// The pinned tcx link of a tc program on an interface.
pub(crate) fn tc_link_pin(pin_dir: &Path, program: &str, ifname: &str) -> PathBuf {
    pin_dir.join(format!("link_{program}@{ifname}"))
}

/// Whether the kernel has tcx links (Linux 6.6).
fn has_tcx() -> bool {
    KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
}

/// The pinned link at `pin`, if it is attached to `target` (a cgroup id
/// or an ifindex): re-point it at `prog`; true when done. A pinned link
/// to another target is detached and unpinned.
fn update_pinned(pin: &Path, target: u64, prog: std::os::fd::BorrowedFd<'_>) -> Result<bool, BpfError> {
    let pin_err = |source| BpfError::Pin { path: pin.into(), source };
    let link = match sys::obj_get(pin) {
        Ok(link) => link,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(pin_err(e)),
    };
    let info = sys::link_info(link.as_fd()).map_err(pin_err)?;
    if info.target == target && sys::link_update(link.as_fd(), prog).is_ok() {
        return Ok(true);
    }
    // Another target, or a link the kernel already detached (its
    // interface went away): drop it and attach afresh.
    let _ = sys::link_detach(link.as_fd());
    std::fs::remove_file(pin).map_err(pin_err)?;
    Ok(false)
}

impl Datapath {
    /// Attach the eight socket programs to the cgroup v2 directory
    /// `cgroup`, as pinned links (they stay attached when kproxy exits).
    pub fn attach_cgroup(&mut self, cgroup: &Path) -> Result<(), BpfError> {
        let target = cgroup.display().to_string();
        let attach_err = |program, source| BpfError::Attach { program, target: target.clone(), source };
        let dir = File::open(cgroup).map_err(|e| attach_err("cgroup", e))?;
        let cgroup_id = dir.metadata().map_err(|e| attach_err("cgroup", e))?.ino();
        for name in programs::SOCK {
            let pin = cgroup_link_pin(&self.pin_dir, name);
            let program: &mut CgroupSockAddr = program_mut(&mut self.ebpf, name)?;
            let prog_fd = program.fd().map_err(|e| attach_err(name, io_of(e)))?;
            // A cgroup's id is its directory's inode number.
            if update_pinned(&pin, cgroup_id, prog_fd.as_fd())? {
                continue;
            }
            let id = program.attach(&dir, CgroupAttachMode::Single).map_err(|e| attach_err(name, io_of(e)))?;
            let link = program.take_link(id).map_err(|e| attach_err(name, io_of(e)))?;
            let link: FdLink = link.try_into().map_err(|e| attach_err(name, io_of(e)))?;
            link.pin(&pin).map_err(|e| BpfError::Pin { path: pin.clone(), source: io_of(e) })?;
        }
        Ok(())
    }

    /// Attach the tc programs to `ifname`'s ingress and egress: tcx links
    /// (pinned) where the kernel has tcx, else cls_bpf filters.
    pub fn attach_tc(&mut self, ifname: &str) -> Result<(), BpfError> {
        self.attach_tc_as(ifname, has_tcx())
    }

    /// [`Datapath::attach_tc`] with the mechanism chosen (tests use
    /// cls_bpf on a kernel that has tcx).
    pub(crate) fn attach_tc_as(&mut self, ifname: &str, tcx: bool) -> Result<(), BpfError> {
        for (name, kind) in [(programs::TC_INGRESS, TcAttachType::Ingress), (programs::TC_EGRESS, TcAttachType::Egress)]
        {
            if tcx {
                self.attach_tcx(name, kind, ifname)?;
            } else {
                self.attach_cls_bpf(name, kind, ifname)?;
            }
        }
        Ok(())
    }

    fn attach_tcx(&mut self, name: &'static str, kind: TcAttachType, ifname: &str) -> Result<(), BpfError> {
        let attach_err = |source| BpfError::Attach { program: name, target: ifname.to_owned(), source };
        let ifindex = sys::ifindex(ifname).map_err(attach_err)?;
        let pin = tc_link_pin(&self.pin_dir, name, ifname);
        let program: &mut SchedClassifier = program_mut(&mut self.ebpf, name)?;
        let prog_fd = program.fd().map_err(|e| attach_err(io_of(e)))?;
        if update_pinned(&pin, u64::from(ifindex), prog_fd.as_fd())? {
            return Ok(());
        }
        let options = TcAttachOptions::TcxOrder(LinkOrder::default());
        let id = program.attach_with_options(ifname, kind, options).map_err(|e| attach_err(io_of(e)))?;
        let link = program.take_link(id).map_err(|e| attach_err(io_of(e)))?;
        let link: FdLink = link.try_into().map_err(|e| attach_err(io_of(e)))?;
        link.pin(&pin).map_err(|e| BpfError::Pin { path: pin.clone(), source: io_of(e) })?;
        Ok(())
    }

    fn attach_cls_bpf(&mut self, name: &'static str, kind: TcAttachType, ifname: &str) -> Result<(), BpfError> {
        let attach_err = |source| BpfError::Attach { program: name, target: ifname.to_owned(), source };
        // EEXIST: the interface already has a clsact qdisc.
        let _ = tc::qdisc_add_clsact(ifname);
        remove_cls_bpf(ifname, name, kind).map_err(attach_err)?;
        let program: &mut SchedClassifier = program_mut(&mut self.ebpf, name)?;
        let options = TcAttachOptions::Netlink(NlOptions::default());
        let id = program.attach_with_options(ifname, kind, options).map_err(|e| attach_err(io_of(e)))?;
        // The filter stays when the link is forgotten (dropping it would
        // remove it); cleanup finds it by its program's name.
        let link = program.take_link(id).map_err(|e| attach_err(io_of(e)))?;
        std::mem::forget(link);
        Ok(())
    }
}

/// Remove the cls_bpf filters named `program` from `ifname`; none is fine.
/// True when one was removed.
pub(crate) fn remove_cls_bpf(ifname: &str, program: &str, kind: TcAttachType) -> std::io::Result<bool> {
    match tc::qdisc_detach_program(ifname, kind, program) {
        Ok(()) => Ok(true),
        Err(tc::TcError::IoError(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_of(e)),
    }
}

impl Datapath {
    /// The interfaces the tc programs are attached to as pinned tcx links
    /// (cls_bpf attachments leave no pin), sorted.
    pub fn tc_interfaces(&self) -> Result<Vec<String>, BpfError> {
        let dir_err = |source| BpfError::PinDir { path: self.pin_dir.clone(), source };
        let mut names: Vec<String> = std::fs::read_dir(&self.pin_dir)
            .map_err(dir_err)?
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                Some(name.strip_prefix("link_")?.split_once('@')?.1.to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Detach the tc programs from `ifname` (its pinned links, or its
    /// cls_bpf filters); nothing attached is fine.
    pub fn detach_tc(&mut self, ifname: &str) -> Result<(), BpfError> {
        for (name, kind) in [(programs::TC_INGRESS, TcAttachType::Ingress), (programs::TC_EGRESS, TcAttachType::Egress)]
        {
            let pin = tc_link_pin(&self.pin_dir, name, ifname);
            if let Ok(link) = sys::obj_get(&pin) {
                let _ = sys::link_detach(link.as_fd());
                std::fs::remove_file(&pin).map_err(|source| BpfError::Pin { path: pin.clone(), source })?;
            }
            // A vanished interface has no filters left to remove.
            if sys::ifindex(ifname).is_ok() {
                remove_cls_bpf(ifname, name, kind)
                    .map_err(|source| BpfError::Detach { interface: ifname.to_owned(), source })?;
            }
        }
        Ok(())
    }
}
