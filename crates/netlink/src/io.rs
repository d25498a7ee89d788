//! Blocking netlink socket calls, retried when a signal interrupts them.

use std::io;

use netlink_sys::Socket;

pub(crate) fn send(socket: &Socket, bytes: &[u8]) -> io::Result<()> {
    loop {
        match socket.send(bytes, 0) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

pub(crate) fn recv(socket: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match socket.recv(&mut &mut buf[..], 0) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
