//! The kernel edge: everything kproxy says to the kernel over netlink.
//!
//! Reading the host's addresses (for node ports), the IPVS mode's dummy
//! interface and its addresses ([`links`]), programming nf_tables ([`nft`])
//! and IPVS ([`ipvs`]), and deleting stale conntrack entries
//! ([`conntrack`]), and listing and destroying UDP sockets ([`sock_diag`]).
//! This crate owns sockets and kernel encodings; it makes
//! no policy decisions.

mod addresses;
pub mod conntrack;
mod io;
pub mod ipvs;
pub mod links;
pub mod nft;
pub mod routes;
pub mod sock_diag;

pub use addresses::host_addresses;

/// A netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// Opening the rtnetlink socket failed.
    #[error("cannot open an rtnetlink socket")]
    Connect(#[source] std::io::Error),
    /// The kernel rejected or broke off an address dump.
    #[error("listing addresses failed")]
    ListAddresses(#[source] rtnetlink::Error),
    /// A local route could not be listed, added or deleted.
    #[error(transparent)]
    Route(#[from] routes::RouteError),
    /// The IPVS mode's dummy link or an address on it could not be managed.
    #[error(transparent)]
    Link(#[from] links::LinkError),
}
