//! Reading `kp_sock_rev`, the socket programs' record of what they
//! translated: for a socket (its cookie) and the backend it was sent to,
//! the frontend it asked for. The daemon reads it to tell sockets kproxy
//! connected to a backend from sockets that talk to that address
//! themselves; only the programs write it.

use std::os::fd::AsFd;

use kproxy_ebpf::maps::{Backend, MapBytes, SockRev, SockRevKey, names};

use crate::datapath::Datapath;
use crate::error::BpfError;
use crate::maps::from_bytes;
use crate::sys;

impl Datapath {
    /// The frontend the socket of `cookie` asked for when the programs
    /// sent it to `backend` instead; `None` if they did not (or the LRU
    /// map has dropped the entry).
    pub fn sock_origin(&self, cookie: u64, backend: &Backend) -> Result<Option<SockRev>, BpfError> {
        let key = SockRevKey { cookie, addr: backend.addr, port: backend.port, pad: 0, pad2: 0 };
        let mut value = [0u8; std::mem::size_of::<SockRev>()];
        let map = self.maps.sock_rev();
        let found = sys::map_lookup(map.fd().as_fd(), key.bytes(), &mut value)
            .map_err(|source| BpfError::MapRead { map: names::SOCK_REV, source })?;
        Ok(found.then(|| from_bytes(&value)))
    }
}
