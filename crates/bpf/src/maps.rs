//! kproxy's maps as the loader uses them: opened from their pins, written
//! by [`Op`]s and read back into [`Contents`]. Keys and values are the
//! bytes of `kproxy_ebpf::maps`' types, which mirror `kproxy_maps.h`.

use std::os::fd::AsFd;
use std::path::Path;

use aya::maps::MapData;
use kproxy_ebpf::maps::{
    Affinity, AffinityKey, Backend, BackendKey, CidrKey, Config, Contents, Flow, FlowKey, Frontend, FrontendKey,
    MapBytes, Op, RangeKey, SockRev, SockRevKey, names,
};

use crate::error::BpfError;
use crate::sys;

/// The maps kproxy writes (the LRU maps belong to the programs).
pub(crate) struct Maps {
    frontends: MapData,
    backends: MapData,
    rr: MapData,
    source_ranges: MapData,
    local_cidrs: MapData,
    config: MapData,
    flows: MapData,
    /// Read only (`Datapath::sock_origin`): the programs own it.
    sock_rev: MapData,
}

/// Every map's name, for pinning and cleanup.
pub(crate) const ALL: [&str; 9] = [
    names::FRONTENDS,
    names::BACKENDS,
    names::RR,
    names::SOURCE_RANGES,
    names::LOCAL_CIDRS,
    names::AFFINITY,
    names::FLOWS,
    names::SOCK_REV,
    names::CONFIG,
];

/// Every map's key and value size as `kproxy_ebpf::maps` lays them out.
const LAYOUT: [(&str, usize, usize); 9] = {
    use std::mem::size_of;
    [
        (names::FRONTENDS, size_of::<FrontendKey>(), size_of::<Frontend>()),
        (names::BACKENDS, size_of::<BackendKey>(), size_of::<Backend>()),
        (names::RR, 4, 8),
        (names::SOURCE_RANGES, size_of::<RangeKey>(), 1),
        (names::LOCAL_CIDRS, size_of::<CidrKey>(), 1),
        (names::AFFINITY, size_of::<AffinityKey>(), size_of::<Affinity>()),
        (names::FLOWS, size_of::<FlowKey>(), size_of::<Flow>()),
        (names::SOCK_REV, size_of::<SockRevKey>(), size_of::<SockRev>()),
        (names::CONFIG, 4, size_of::<Config>()),
    ]
};

/// Open a pinned map, checking its key and value sizes against the Rust
/// mirror: the map syscalls read as many bytes as the map says, so a
/// contract drift must fail here, not read past a buffer.
fn open(pin_dir: &Path, map: &'static str) -> Result<MapData, BpfError> {
    let data = MapData::from_pin(pin_dir.join(map)).map_err(|e| BpfError::OpenMap { map, source: Box::new(e) })?;
    let info = data.info().map_err(|e| BpfError::OpenMap { map, source: Box::new(e) })?;
    let (_, key, value) = LAYOUT.iter().find(|(name, _, _)| *name == map).expect("every map has a layout");
    let got = (info.key_size() as usize, info.value_size() as usize);
    if got != (*key, *value) {
        return Err(BpfError::Layout { map, want: (*key, *value), got });
    }
    Ok(data)
}

/// Check every map's layout (the LRU maps too, which the loader never
/// writes, so that the contract holds for all of `kproxy_maps.h`).
pub(crate) fn check_layout(pin_dir: &Path) -> Result<(), BpfError> {
    ALL.iter().try_for_each(|map| open(pin_dir, map).map(drop))
}

/// A value of a `MapBytes` type from the bytes the kernel returned.
pub(crate) fn from_bytes<T: MapBytes + Default>(bytes: &[u8]) -> T {
    let mut value = T::default();
    assert_eq!(bytes.len(), std::mem::size_of::<T>(), "a map element of the declared size");
    // SAFETY: MapBytes types are repr(C) integers and byte arrays, so any
    // bytes of the right length are a valid value; the sizes match above.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), bytes.len()) };
    value
}

impl Maps {
    pub(crate) fn open(pin_dir: &Path) -> Result<Maps, BpfError> {
        Ok(Maps {
            frontends: open(pin_dir, names::FRONTENDS)?,
            backends: open(pin_dir, names::BACKENDS)?,
            rr: open(pin_dir, names::RR)?,
            source_ranges: open(pin_dir, names::SOURCE_RANGES)?,
            local_cidrs: open(pin_dir, names::LOCAL_CIDRS)?,
            config: open(pin_dir, names::CONFIG)?,
            flows: open(pin_dir, names::FLOWS)?,
            sock_rev: open(pin_dir, names::SOCK_REV)?,
        })
    }

    /// Write one op: the map it touched and the kernel's answer.
    pub(crate) fn apply(&self, op: &Op) -> (&'static str, std::io::Result<()>) {
        const ONE: [u8; 1] = [1];
        let put = |m: &MapData, k: &[u8], v: &[u8]| sys::map_update(m.fd().as_fd(), k, v);
        let del = |m: &MapData, k: &[u8]| sys::map_delete(m.fd().as_fd(), k);
        match op {
            Op::PutBackend(k, v) => (names::BACKENDS, put(&self.backends, k.bytes(), v.bytes())),
            Op::DeleteBackend(k) => (names::BACKENDS, del(&self.backends, k.bytes())),
            Op::PutFrontend(k, v) => (names::FRONTENDS, put(&self.frontends, k.bytes(), v.bytes())),
            Op::DeleteFrontend(k) => (names::FRONTENDS, del(&self.frontends, k.bytes())),
            Op::PutSourceRange(k) => (names::SOURCE_RANGES, put(&self.source_ranges, k.bytes(), &ONE)),
            Op::DeleteSourceRange(k) => (names::SOURCE_RANGES, del(&self.source_ranges, k.bytes())),
            Op::PutLocalCidr(k) => (names::LOCAL_CIDRS, put(&self.local_cidrs, k.bytes(), &ONE)),
            Op::DeleteLocalCidr(k) => (names::LOCAL_CIDRS, del(&self.local_cidrs, k.bytes())),
            Op::DeleteRr(group) => (names::RR, del(&self.rr, &group.to_ne_bytes())),
            Op::PutConfig(c) => (names::CONFIG, put(&self.config, &0u32.to_ne_bytes(), c.bytes())),
        }
    }

    pub(crate) fn dump(&self) -> Result<Contents, BpfError> {
        let mut contents = Contents::default();
        for (k, v) in entries::<FrontendKey>(&self.frontends, names::FRONTENDS, 32)? {
            contents.frontends.insert(k, from_bytes::<Frontend>(&v));
        }
        for (k, v) in entries::<BackendKey>(&self.backends, names::BACKENDS, 20)? {
            contents.backends.insert(k, from_bytes(&v));
        }
        for (k, _) in entries::<RangeKey>(&self.source_ranges, names::SOURCE_RANGES, 1)? {
            contents.source_ranges.insert(k);
        }
        for (k, _) in entries::<CidrKey>(&self.local_cidrs, names::LOCAL_CIDRS, 1)? {
            contents.local_cidrs.insert(k);
        }
        Ok(contents)
    }

    /// Delete the tc flows of `frontend` (its address, port and protocol)
    /// that go to `backend` (any backend: `None`), both directions; how
    /// many connections.
    pub(crate) fn forget_flows(&self, frontend: &FrontendKey, backend: Option<&Backend>) -> Result<usize, BpfError> {
        let fd = self.flows.fd().as_fd();
        let err = |source| BpfError::MapUpdate {
            map: names::FLOWS,
            index: 0,
            op: format!("forget flows of {frontend:?} to {backend:?}"),
            source,
        };
        let mut count = 0;
        for (key, value) in entries::<FlowKey>(&self.flows, names::FLOWS, std::mem::size_of::<Flow>())? {
            let flow: Flow = from_bytes(&value);
            let forward = key.direction == 0
                && (key.daddr, key.dport, key.proto) == (frontend.addr, frontend.port, frontend.proto)
                && backend.is_none_or(|b| (flow.addr, flow.port) == (b.addr, b.port));
            if !forward {
                continue;
            }
            let reverse = FlowKey {
                saddr: flow.addr,
                daddr: key.saddr,
                sport: flow.port,
                dport: key.sport,
                proto: key.proto,
                direction: 1,
                pad: 0,
            };
            sys::map_delete(fd, key.bytes()).map_err(err)?;
            sys::map_delete(fd, reverse.bytes()).map_err(err)?;
            count += 1;
        }
        Ok(count)
    }

    pub(crate) fn sock_rev(&self) -> &MapData {
        &self.sock_rev
    }

    pub(crate) fn config(&self) -> Result<Config, BpfError> {
        let mut value = [0u8; std::mem::size_of::<Config>()];
        sys::map_lookup(self.config.fd().as_fd(), &0u32.to_ne_bytes(), &mut value)
            .map_err(|source| BpfError::MapRead { map: names::CONFIG, source })?;
        Ok(from_bytes(&value))
    }
}

/// Every (key, value bytes) of a map. Walking with GET_NEXT_KEY while the
/// programs write is fine for the planner's maps: only kproxy writes them.
fn entries<K: MapBytes + Default>(
    map: &MapData,
    name: &'static str,
    value_size: usize,
) -> Result<Vec<(K, Vec<u8>)>, BpfError> {
    let fd = map.fd().as_fd();
    let err = |source| BpfError::MapRead { map: name, source };
    let mut out = Vec::new();
    let mut key = vec![0u8; std::mem::size_of::<K>()];
    let mut prev: Option<Vec<u8>> = None;
    while sys::map_next_key(fd, prev.as_deref(), &mut key).map_err(err)? {
        let mut value = vec![0u8; value_size];
        // A key deleted between the two calls is skipped.
        if sys::map_lookup(fd, &key, &mut value).map_err(err)? {
            out.push((from_bytes::<K>(&key), value));
        }
        prev = Some(key.clone());
    }
    Ok(out)
}
