//! nf_tables over netlink: kproxy's plans encoded as the messages `nft`
//! would send, applied in one transaction, and the kernel's answers
//! decoded; the chain names of a table listed (for the iptables mode's
//! nft backend), and the rules of a chain with their handles and verdicts
//! (to remove another proxy's iptables-nft chains without the tools).

mod chains;
pub mod decode;
mod dump;
pub mod encode;
mod expr;
mod rules;
mod socket;
mod stream;
pub mod types;
pub mod wire;

pub use chains::{chain_names, chain_names_by_table};
pub use decode::{Attr, DecodeError, Message, parse};
pub use dump::DumpError;
pub use encode::{Encoded, Encoder, IntervalSets, encode, encode_table, encode_tables};
pub use rules::{ListedRule, rules};
pub use socket::{ApplyError, KernelError, apply, apply_batch};
pub use stream::{Batch, Streamer, encode_streamed};
