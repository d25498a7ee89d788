//! The few `bpf(2)` commands aya does not expose (map element access by
//! raw bytes, link update/detach/info, program query and test run), the
//! bpffs check and the netns cookie. Every `unsafe` block of the crate is
//! here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_OBJ_GET: libc::c_long = 7;
#[cfg(test)]
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
#[cfg(test)]
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_LINK_UPDATE: libc::c_long = 29;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `BPF_FS_MAGIC` from `linux/magic.h`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// `SO_NETNS_COOKIE` (Linux 5.14).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The `bpf_attr` union, large enough for every command used here; the
/// kernel reads only the command's leading fields and wants the rest zero.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Attr([0; 128])
    }
    fn put_u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn put_u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    #[cfg(test)]
    fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, writable buffer of the size passed; every
    // pointer stored in it by the callers points at a live buffer of the
    // length the kernel will read or write for that command.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn ptr(bytes: &[u8]) -> u64 {
    bytes.as_ptr() as u64
}

/// Write one element (`BPF_ANY`).
pub fn map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut attr = Attr::new();
    attr.put_u32(0, map.as_raw_fd() as u32).put_u64(8, ptr(key)).put_u64(16, ptr(value));
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Delete one element; a missing key is not an error (deletes are
/// idempotent, so a sync replayed after a restart converges).
pub fn map_delete(map: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    let mut attr = Attr::new();
    attr.put_u32(0, map.as_raw_fd() as u32).put_u64(8, ptr(key));
    match bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other.map(drop),
    }
}

/// Read one element into `value`; false when the key is absent.
pub fn map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr = Attr::new();
    attr.put_u32(0, map.as_raw_fd() as u32).put_u64(8, ptr(key)).put_u64(16, value.as_mut_ptr() as u64);
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        other => other.map(|_| true),
    }
}

/// The key after `key` (the first key when `None`); false at the end.
pub fn map_next_key(map: BorrowedFd<'_>, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    let mut attr = Attr::new();
    attr.put_u32(0, map.as_raw_fd() as u32).put_u64(8, key.map_or(0, ptr)).put_u64(16, next.as_mut_ptr() as u64);
    match bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        other => other.map(|_| true),
    }
}

/// Open a pinned object (map, link or program).
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut attr = Attr::new();
    attr.put_u64(0, c.as_ptr() as u64);
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: BPF_OBJ_GET returned a new file descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// What a link is attached to, from `bpf_link_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// `BPF_LINK_TYPE_*`.
    pub link_type: u32,
    pub prog_id: u32,
    /// The cgroup id (cgroup links) or the ifindex (tcx links).
    pub target: u64,
    /// `BPF_*` attach type.
    pub attach_type: u32,
}

/// `BPF_LINK_TYPE_CGROUP`.
pub const LINK_TYPE_CGROUP: u32 = 3;

pub fn link_info(link: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    // struct bpf_link_info: type, id, prog_id, then a union at offset 16:
    // cgroup { u64 cgroup_id; u32 attach_type; }, tcx { u32 ifindex; u32 attach_type; }.
    let mut info = [0u8; 64];
    let mut attr = Attr::new();
    attr.put_u32(0, link.as_raw_fd() as u32).put_u32(4, info.len() as u32).put_u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let u32_at = |off: usize| u32::from_ne_bytes(info[off..off + 4].try_into().expect("4 bytes"));
    let link_type = u32_at(0);
    let (target, attach_type) = match link_type {
        LINK_TYPE_CGROUP => (u64::from_ne_bytes(info[16..24].try_into().expect("8 bytes")), u32_at(24)),
        _ => (u64::from(u32_at(16)), u32_at(20)),
    };
    Ok(LinkInfo { link_type, prog_id: u32_at(8), target, attach_type })
}

/// Point a link at another program (atomic: no moment without one).
pub fn link_update(link: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = Attr::new();
    attr.put_u32(0, link.as_raw_fd() as u32).put_u32(4, prog.as_raw_fd() as u32);
    bpf(BPF_LINK_UPDATE, &mut attr).map(drop)
}

/// Detach a link now, whoever else holds it open.
pub fn link_detach(link: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = Attr::new();
    attr.put_u32(0, link.as_raw_fd() as u32);
    bpf(BPF_LINK_DETACH, &mut attr).map(drop)
}

#[cfg(test)]
/// The ids of the programs attached to `target` (a cgroup) for
/// `attach_type` (`BPF_PROG_QUERY`).
pub fn prog_query(target: BorrowedFd<'_>, attach_type: u32) -> io::Result<Vec<u32>> {
    let mut ids = [0u32; 64];
    let mut attr = Attr::new();
    attr.put_u32(0, target.as_raw_fd() as u32)
        .put_u32(4, attach_type)
        .put_u64(16, ids.as_mut_ptr() as u64)
        .put_u32(24, ids.len() as u32);
    bpf(BPF_PROG_QUERY, &mut attr)?;
    let count = (attr.get_u32(24) as usize).min(ids.len());
    Ok(ids[..count].to_vec())
}

#[cfg(test)]
/// Run a program once on `data` (`BPF_PROG_TEST_RUN`): its return value.
pub fn prog_test_run(prog: BorrowedFd<'_>, data: &[u8]) -> io::Result<u32> {
    let mut attr = Attr::new();
    attr.put_u32(0, prog.as_raw_fd() as u32).put_u32(8, data.len() as u32).put_u64(16, ptr(data)).put_u32(32, 1);
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.get_u32(4))
}

/// Whether `path` is on a bpffs.
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statfs is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a live statfs buffer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// The cookie of the calling thread's network namespace.
pub fn netns_cookie() -> io::Result<u64> {
    // SAFETY: a plain socket(2) call; the fd is owned right below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) returned a new descriptor that nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: `cookie` and `len` are live and sized as the option needs.
    let ret = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

/// The index of interface `ifname` in the current network namespace.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let c = CString::new(ifname).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 { Err(io::Error::last_os_error()) } else { Ok(index) }
}

/// The names of the current network namespace's interfaces.
pub fn interfaces() -> io::Result<Vec<String>> {
    // SAFETY: if_nameindex returns an array ending with a zero entry, or
    // NULL; it is freed below with if_freenameindex and not used after.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut names = Vec::new();
        let mut entry = list;
        while (*entry).if_index != 0 {
            names.push(std::ffi::CStr::from_ptr((*entry).if_name).to_string_lossy().into_owned());
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
        Ok(names)
    }
}
