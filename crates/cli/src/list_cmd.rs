//! `kproxy list`: a running kproxy's `/list`, as `ipvsadm -Ln` prints it
//! (or, with `-o json`, as JSON).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use kproxy_admin::listing::{VirtualServer, render};

use crate::args::{ListArgs, Output};

pub fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let addr = args.address;
    let unreachable = || format!("no kproxy answers on {addr} (its metricsBindAddress; pass --address)");
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).with_context(unreachable)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET /list HTTP/1.0\r\nHost: localhost\r\n\r\n").with_context(unreachable)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).with_context(unreachable)?;
    let (head, body) = answer.split_once("\r\n\r\n").with_context(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(status.contains(" 200 "), "{addr}/list: {status} (a kproxy older than `kproxy list`?)");
    let servers: Vec<VirtualServer> =
        serde_json::from_str(body).with_context(|| format!("{addr}/list: not the list kproxy serves"))?;
    match args.output {
        Output::Table => crate::output::print(&render(&servers))?,
        // Re-encoded, so the output is /list's shape whatever the running
        // kproxy's version (older snake_case keys read and written anew).
        Output::Json => crate::output::print(&format!("{}\n", serde_json::to_string_pretty(&servers)?))?,
    }
    Ok(ExitCode::SUCCESS)
}
