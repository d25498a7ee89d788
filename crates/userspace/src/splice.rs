//! Zero-copy forwarding for bulk transfers: `splice(2)` moves bytes from
//! one socket into a pipe and from the pipe into the other socket, so the
//! payload never crosses into userspace. Each spliced direction holds one
//! pipe (two descriptors, up to 64 KiB of kernel pages in flight).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::tcp::{Clock, Traffic};

/// Bytes asked for per splice: a default pipe's capacity.
const MAX: usize = 64 * 1024;

/// A non-blocking pipe, closed when dropped.
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors owned by no
        // one else.
        unsafe { Ok(Pipe { read: OwnedFd::from_raw_fd(fds[0]), write: OwnedFd::from_raw_fd(fds[1]) }) }
    }
}

/// How a spliced direction ended without an error.
pub enum Ended {
    /// The source closed its side.
    Eof,
    /// The kernel cannot splice from this source; nothing was moved.
    Unsupported,
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: plain descriptors and null offsets (neither end is a file).
    let n = unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Moves bytes from `from` to `to` through `pipe` until `from` ends. A
/// source that cannot be spliced is reported before anything moved, so the
/// caller can copy instead.
pub async fn relay(
    from: &OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    pipe: &Pipe,
    clock: &Clock,
    traffic: &Traffic,
) -> io::Result<Ended> {
    let (source, sink) = (from.as_ref(), to.as_ref());
    let (source_fd, sink_fd) = (source.as_raw_fd(), sink.as_raw_fd());
    let mut moved_any = false;
    loop {
        source.readable().await?;
        let n = match source.try_io(Interest::READABLE, || splice(source_fd, pipe.write.as_raw_fd(), MAX)) {
            Ok(0) => return Ok(Ended::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if !moved_any && unsupported(&e) => return Ok(Ended::Unsupported),
            Err(e) => return Err(e),
        };
        moved_any = true;
        clock.touch();
        let mut pending = n;
        while pending > 0 {
            match sink.try_io(Interest::WRITABLE, || splice(pipe.read.as_raw_fd(), sink_fd, pending)) {
                // The pipe holds `pending` bytes: zero means something is
                // badly wrong; do not spin on it.
                Ok(0) => return Err(io::Error::other("splice from a non-empty pipe moved nothing")),
                Ok(m) => pending -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => sink.writable().await?,
                Err(e) => return Err(e),
            }
        }
        traffic.spliced.inc_by(n as u64);
    }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP))
}
