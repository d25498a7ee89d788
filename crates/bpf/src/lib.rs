//! The ebpf mode's kernel edge: kproxy's BPF programs, loaded, pinned and
//! attached, and their maps written. The programs' sources are under
//! `programs/`; `programs/kproxy_maps.h` is the map layout the planner
//! (`kproxy-ebpf`) mirrors. Planning what the maps should hold is not
//! here: this crate only writes the [`Op`](kproxy_ebpf::maps::Op)s it is
//! given and reads the maps back.
//!
//! The object is compiled by `build.rs` with clang when clang is there, or
//! is the committed `programs/kproxy.bpf.o` otherwise (see `build.rs`).

mod attach;
mod cleanup;
mod datapath;
mod error;
mod maps;
mod sock_rev;
mod sys;

pub use cleanup::{Removed, cleanup};
pub use datapath::{Datapath, read_pinned};
pub use error::BpfError;

/// Program names, as the object declares them.
pub mod programs {
    pub const CONNECT4: &str = "kp_connect4";
    pub const CONNECT6: &str = "kp_connect6";
    pub const SENDMSG4: &str = "kp_sendmsg4";
    pub const SENDMSG6: &str = "kp_sendmsg6";
    pub const RECVMSG4: &str = "kp_recvmsg4";
    pub const RECVMSG6: &str = "kp_recvmsg6";
    pub const GETPEERNAME4: &str = "kp_getpeername4";
    pub const GETPEERNAME6: &str = "kp_getpeername6";
    pub const TC_INGRESS: &str = "kp_tc_ingress";
    pub const TC_EGRESS: &str = "kp_tc_egress";
    /// Test only: returns `kp_hash` of the 16 bytes after the Ethernet header.
    pub const HASH_SELFTEST: &str = "kp_hash_selftest";
    /// The socket programs, attached to the cgroup.
    pub const SOCK: [&str; 8] =
        [CONNECT4, CONNECT6, SENDMSG4, SENDMSG6, RECVMSG4, RECVMSG6, GETPEERNAME4, GETPEERNAME6];
}

/// The object's bytes, aligned for the ELF parser.
#[repr(C, align(8))]
struct Aligned<B: ?Sized>(B);

static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/kproxy.bpf.o")));

/// The embedded BPF object (fresh from clang, or the committed one).
pub fn object() -> &'static [u8] {
    &OBJECT.0
}

/// Where the embedded object came from: `"clang"` or `"committed"`.
pub const OBJECT_SOURCE: &str = env!("KPROXY_BPF_OBJECT_SOURCE");

/// Whether `path` is on a bpffs (false when it cannot be asked).
pub fn is_bpffs(path: &std::path::Path) -> bool {
    sys::is_bpffs(path).unwrap_or(false)
}

/// The calling thread's network namespace cookie (for
/// [`Config::node_netns_cookie`](kproxy_ebpf::maps::Config)).
pub fn netns_cookie() -> Result<u64, BpfError> {
    sys::netns_cookie().map_err(BpfError::NetnsCookie)
}

#[cfg(test)]
mod tests;
