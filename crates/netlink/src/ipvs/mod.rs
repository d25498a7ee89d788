//! IPVS over generic netlink (family `IPVS`): virtual services,
//! destinations, timeouts and version, encoded as the messages `ipvsadm`
//! sends and decoded from the kernel's answers.
//!
//! The codec is sans-I/O: [`encode()`] turns a [`Request`] and a
//! [`Header`] (seq, port id, resolved family id) into bytes, and
//! [`decode`] turns received bytes into [`types`]. [`Client`] is the thin
//! blocking socket around them. [`read_table`] reads the whole table
//! back and [`listing::render`] prints it exactly as `ipvsadm -Ln` does.
//! Nothing here makes policy decisions
//! (what to create is the IPVS planner's). The
//! wire facts, and the captures the tests replay, are in
//! `testdata/ipvs/README.md`.

mod client;
pub mod decode;
pub mod encode;
mod entry;
pub mod listing;
mod table;
pub mod types;
mod wire;

#[cfg(all(test, target_endian = "little"))]
mod tests;
#[cfg(all(test, target_endian = "little"))]
mod tests_listing;

pub use client::{Client, ClientError};
pub use decode::{DecodeError, Dump, ReplyError};
pub use encode::{Header, Request, encode, get_family};
pub use table::{ListedService, Table, read_table};
pub use types::{
    Connections, Destination, DestinationEntry, Family, Forward, GenlFamily, Info, Protocol, Service, ServiceEntry,
    ServiceFlags, ServiceKey, Stats, Timeouts, Tunnel, TunnelEncap,
};
