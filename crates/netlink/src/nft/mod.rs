//! nf_tables over netlink: kproxy's plans encoded as the messages `nft`
//! would send, applied in one transaction, and the kernel's answers
//! decoded; and the chain names of a table listed (for the iptables
//! mode's nft backend).

mod chains;
pub mod decode;
pub mod encode;
mod expr;
mod socket;
pub mod types;
pub mod wire;

pub use chains::{ListChainsError, chain_names, chain_names_by_table};
pub use decode::{Attr, DecodeError, Message, parse};
pub use encode::{Encoded, Encoder, IntervalSets, encode, encode_table};
pub use socket::{ApplyError, apply};
