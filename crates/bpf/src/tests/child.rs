//! Client processes for the socket tests. The socket programs act on the
//! sockets of processes in the test cgroup, so a client runs as a child
//! (this test binary again, running only [`child_entry`]) that joins the
//! cgroup and the network namespace before exec, then prints one
//! `KPRESULT` line.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use kproxy_sandbox::Netns;

use super::support::TestCgroup;

const TIMEOUT: Duration = Duration::from_secs(2);

/// What a client saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The peer as the socket reports it (getpeername or recvfrom), and the reply line.
    Reply { peer: SocketAddr, line: String },
    /// The error's raw errno.
    Error(i32),
}

/// Run `task` (`tcp ADDR` or `udp ADDR`) in `ns`, in `cgroup` if given.
pub fn run(ns: &Netns, cgroup: Option<&TestCgroup>, task: &str) -> Outcome {
    let netns = std::fs::File::open(ns.path()).expect("open the netns");
    let procs = cgroup.map(|c| {
        std::fs::OpenOptions::new().write(true).open(c.path().join("cgroup.procs")).expect("open cgroup.procs")
    });
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.args(["--exact", "tests::child::child_entry", "--nocapture", "--test-threads=1"]);
    command.env("KP_BPF_CHILD", task);
    let (netns_fd, procs_fd) = (netns.as_raw_fd(), procs.as_ref().map(|f| f.as_raw_fd()));
    // SAFETY: between fork and exec the hook only makes two syscalls
    // (write, setns) on descriptors the parent keeps open until spawn
    // returns; "0" moves the writing process itself into the cgroup.
    unsafe {
        command.pre_exec(move || {
            if let Some(fd) = procs_fd
                && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setns(netns_fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().expect("run the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|l| l.split_once("KPRESULT ").map(|(_, r)| r)).unwrap_or_else(|| {
        panic!("client {task} printed no result: {stdout} {}", String::from_utf8_lossy(&output.stderr))
    });
    parse(line)
}

fn parse(line: &str) -> Outcome {
    if let Some(errno) = line.strip_prefix("err ") {
        return Outcome::Error(errno.parse().expect("an errno"));
    }
    let (peer, reply) = line.split_once(' ').expect("peer and reply");
    Outcome::Reply { peer: peer.parse().expect("a peer address"), line: reply.to_owned() }
}

fn tcp(to: SocketAddr) -> std::io::Result<(SocketAddr, String)> {
    let mut stream = TcpStream::connect_timeout(&to, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let peer = stream.peer_addr()?;
    stream.write_all(b"hello\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok((peer, line))
}

fn udp(to: SocketAddr) -> std::io::Result<(SocketAddr, String)> {
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("literal");
    let socket = UdpSocket::bind(any)?;
    socket.set_read_timeout(Some(TIMEOUT))?;
    // Unconnected: sendmsg translates, recvmsg shows the frontend again.
    socket.send_to(b"hello\n", to)?;
    let mut buf = [0u8; 512];
    let (n, from) = socket.recv_from(&mut buf)?;
    Ok((from, String::from_utf8_lossy(&buf[..n]).into_owned()))
}

/// The line a child prints for its result.
fn result_line(result: std::io::Result<(SocketAddr, String)>) -> String {
    match result {
        Ok((peer, line)) => format!("KPRESULT {peer} {}", line.trim_end()),
        Err(e) => format!("KPRESULT err {}", e.raw_os_error().unwrap_or(-1)),
    }
}

/// The child's side when `KP_BPF_CHILD` names a task (the socket tests
/// run this test binary again for it, in their cgroup and namespace);
/// otherwise, as a test of its own, the lines a child prints read back as
/// the outcomes they report.
#[test]
fn child_entry() {
    let Ok(task) = std::env::var("KP_BPF_CHILD") else {
        let peer: SocketAddr = "10.96.0.10:80".parse().expect("literal");
        let reply = result_line(Ok((peer, "hello from a\n".to_owned())));
        let line = reply.split_once("KPRESULT ").expect("the marker").1;
        assert_eq!(parse(line), Outcome::Reply { peer, line: "hello from a".to_owned() });
        let refused = result_line(Err(std::io::Error::from_raw_os_error(libc::ECONNREFUSED)));
        let line = refused.split_once("KPRESULT ").expect("the marker").1;
        assert_eq!(parse(line), Outcome::Error(libc::ECONNREFUSED));
        return;
    };
    let (kind, to) = task.split_once(' ').expect("KIND ADDR");
    let to: SocketAddr = to.parse().expect("an address");
    let result = if kind == "tcp" { tcp(to) } else { udp(to) };
    println!("{}", result_line(result));
}
