//! The host's interface addresses.

use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::address::AddressAttribute;

use crate::NetlinkError;

/// Every address on every interface of this network namespace, in the
/// kernel's order (by interface, then as configured).
pub async fn host_addresses() -> Result<Vec<IpAddr>, NetlinkError> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(NetlinkError::Connect)?;
    let connection = tokio::spawn(connection);
    let mut dump = handle.address().get().execute();
    let mut out = Vec::new();
    while let Some(message) = dump.try_next().await.map_err(NetlinkError::ListAddresses)? {
        // On point-to-point links IFA_ADDRESS is the peer; IFA_LOCAL is ours.
        let local = message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let address = message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        });
        out.extend(local.or(address));
    }
    connection.abort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_is_always_listed() {
        let addresses = host_addresses().await.expect("listing addresses needs no privileges");
        assert!(addresses.contains(&IpAddr::from([127, 0, 0, 1])), "{addresses:?}");
    }
}
