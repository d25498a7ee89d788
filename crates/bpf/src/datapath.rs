//! [`Datapath`]: the loaded object with its maps pinned by name under a
//! directory on a bpffs, so that a restarted kproxy reuses them (flows,
//! affinity and the round-robin counters survive) and the attached
//! programs keep running while kproxy is down.

use std::path::{Path, PathBuf};

use aya::programs::{CgroupSockAddr, SchedClassifier};
use aya::{Ebpf, EbpfLoader};
use kproxy_ebpf::maps::{Backend, Config, Contents, FrontendKey, Op};

use crate::error::BpfError;
use crate::maps::{self, Maps};
use crate::{programs, sys};

/// kproxy's BPF programs, loaded, with their maps pinned under `pin_dir`.
pub struct Datapath {
    pub(crate) pin_dir: PathBuf,
    pub(crate) ebpf: Ebpf,
    pub(crate) maps: Maps,
}

impl Datapath {
    /// Load the embedded object, pinning its maps under `pin_dir` by name,
    /// or reusing the maps already pinned there. `pin_dir` is created if
    /// missing; its parent must be a bpffs (nothing is mounted here).
    pub fn load(pin_dir: &Path) -> Result<Datapath, BpfError> {
        Self::load_object(pin_dir, crate::object())
    }

    pub(crate) fn load_object(pin_dir: &Path, object: &[u8]) -> Result<Datapath, BpfError> {
        let parent = pin_dir.parent().unwrap_or(Path::new("/"));
        let on_bpffs = sys::is_bpffs(parent).map_err(|source| BpfError::PinDir { path: parent.into(), source })?;
        if !on_bpffs {
            return Err(BpfError::NotBpffs(parent.into()));
        }
        match std::fs::create_dir(pin_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(BpfError::PinDir { path: pin_dir.into(), source: e });
            }
            _ => {}
        }
        let pins: Vec<(&str, PathBuf)> = maps::ALL.iter().map(|name| (*name, pin_dir.join(name))).collect();
        let mut loader = EbpfLoader::new();
        for (name, path) in &pins {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(object).map_err(|e| BpfError::Load(Box::new(e)))?;
        for name in programs::SOCK {
            let program: &mut CgroupSockAddr = program_mut(&mut ebpf, name)?;
            program.load().map_err(|e| BpfError::LoadProgram { program: name, source: Box::new(e) })?;
        }
        for name in [programs::TC_INGRESS, programs::TC_EGRESS] {
            let program: &mut SchedClassifier = program_mut(&mut ebpf, name)?;
            program.load().map_err(|e| BpfError::LoadProgram { program: name, source: Box::new(e) })?;
        }
        maps::check_layout(pin_dir)?;
        let maps = Maps::open(pin_dir)?;
        Ok(Datapath { pin_dir: pin_dir.into(), ebpf, maps })
    }

    /// The directory the maps and links are pinned in.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Write `ops` in order; stops at the first failure, which names the
    /// op and the map. Returns how many ops were written. Deleting an
    /// absent key succeeds (a replayed sync converges).
    pub fn apply(&mut self, ops: &[Op]) -> Result<usize, BpfError> {
        for (index, op) in ops.iter().enumerate() {
            let (map, result) = self.maps.apply(op);
            result.map_err(|source| BpfError::MapUpdate { map, index, op: format!("{op:?}"), source })?;
        }
        Ok(ops.len())
    }

    /// What the planner-owned maps hold now.
    pub fn dump(&self) -> Result<Contents, BpfError> {
        self.maps.dump()
    }

    /// Write `kp_config`.
    pub fn write_config(&mut self, config: Config) -> Result<(), BpfError> {
        self.apply(&[Op::PutConfig(config)]).map(drop)
    }

    /// Forget the tc connections from `frontend` to `backend` (both
    /// directions of each): the ebpf mode's equivalent of deleting the
    /// conntrack entries of a UDP endpoint that stopped being used, so
    /// that the flow's next packet picks a current backend. Returns how
    /// many connections were forgotten. (Sockets translated by the cgroup
    /// programs are not affected: a connected UDP socket keeps its backend;
    /// see [`Datapath::sock_origin`].)
    pub fn forget_flows(&mut self, frontend: &FrontendKey, backend: &Backend) -> Result<usize, BpfError> {
        self.maps.forget_flows(frontend, Some(backend))
    }

    /// Forget every tc connection to `frontend`, whatever its backend
    /// (both directions): for a UDP frontend that went away.
    pub fn forget_frontend_flows(&mut self, frontend: &FrontendKey) -> Result<usize, BpfError> {
        self.maps.forget_flows(frontend, None)
    }

    /// Read `kp_config` back.
    pub fn config(&self) -> Result<Config, BpfError> {
        self.maps.config()
    }
}

/// A program of the object, as its type.
pub(crate) fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, BpfError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    let program = ebpf.program_mut(name).ok_or(BpfError::Missing(name))?;
    program.try_into().map_err(|_| BpfError::Missing(name))
}

/// What the planner-owned maps and `kp_config` pinned under `pin_dir`
/// hold, read without loading any program (for `kproxy list` and `trace`
/// while the daemon runs).
pub fn read_pinned(pin_dir: &Path) -> Result<(Contents, Config), BpfError> {
    maps::check_layout(pin_dir)?;
    let maps = Maps::open(pin_dir)?;
    Ok((maps.dump()?, maps.config()?))
}
