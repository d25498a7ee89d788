//! The crate's one error type: each variant names the step that failed and
//! the object it failed on; the cause is the source.

use std::io;
use std::path::PathBuf;

/// What went wrong loading, attaching, writing or removing kproxy's BPF
/// objects.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The pin directory's parent is not a BPF filesystem.
    #[error("{0} is not on a bpffs (mount one, e.g. `mount -t bpf bpf /sys/fs/bpf`)")]
    NotBpffs(PathBuf),
    /// Creating, reading or removing something under the pin directory.
    #[error("pin directory {path}")]
    PinDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Parsing the object or creating (or reusing) its pinned maps.
    #[error("load the BPF object")]
    Load(#[source] Box<aya::EbpfError>),
    /// The object lacks a program or map the loader needs.
    #[error("the BPF object has no {0}")]
    Missing(&'static str),
    /// The verifier refused a program, or the load syscall failed.
    #[error("load program {program}")]
    LoadProgram {
        program: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// Opening a pinned map.
    #[error("open pinned map {map}")]
    OpenMap {
        map: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// A map's key or value size differs from `kproxy_ebpf::maps` (the
    /// object and the Rust mirror of `kproxy_maps.h` disagree, or an old
    /// pinned map has another layout: `kproxy cleanup` removes it).
    #[error("map {map} has key/value sizes {got:?}, kproxy expects {want:?}")]
    Layout { map: &'static str, want: (usize, usize), got: (usize, usize) },
    /// Attaching (or re-pointing a pinned link of) a program.
    #[error("attach {program} to {target}")]
    Attach {
        program: &'static str,
        target: String,
        #[source]
        source: io::Error,
    },
    /// Pinning a link, or replacing or removing a pinned one.
    #[error("pin {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A map write of [`crate::Datapath::apply`]: which op, on which map.
    #[error("map {map} update (op {index}: {op})")]
    MapUpdate {
        map: &'static str,
        index: usize,
        op: String,
        #[source]
        source: io::Error,
    },
    /// Reading a map back.
    #[error("map {map} read")]
    MapRead {
        map: &'static str,
        #[source]
        source: io::Error,
    },
    /// Removing a cls_bpf filter of kproxy's from an interface.
    #[error("remove the tc filters from {interface}")]
    Detach {
        interface: String,
        #[source]
        source: io::Error,
    },
    /// Reading the network namespace cookie.
    #[error("read the network namespace cookie")]
    NetnsCookie(#[source] io::Error),
}

/// An aya error as an `io::Error` (the variants above keep the step).
pub(crate) fn io_of(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}
