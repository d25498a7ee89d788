//! The one-line answer every sandbox backend gives: `<backend> <peer-ip>\n`.

use std::net::IpAddr;

/// What a probe got back: which backend answered, and the source address it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The backend's name, as given to [`Backend::start`](crate::Backend::start).
    pub backend: String,
    /// The request's source address as the backend saw it (IPv4-mapped shown as IPv4).
    pub peer: IpAddr,
}

impl Reply {
    /// The wire form, `<backend> <peer>\n`.
    pub fn line(&self) -> String {
        format!("{} {}\n", self.backend, self.peer)
    }

    /// Parses the wire form; the trailing newline is optional and the name may contain spaces.
    pub fn parse(line: &str) -> Option<Reply> {
        let (backend, peer) = line.trim_end_matches(['\r', '\n']).rsplit_once(' ')?;
        Some(Reply { backend: backend.to_owned(), peer: peer.parse().ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_line_round_trips_in_both_families() {
        for peer in ["10.244.1.10", "fd00:10:244:1::10"] {
            let reply = Reply { backend: "web 1".to_owned(), peer: peer.parse().expect("a literal address") };
            assert_eq!(Reply::parse(&reply.line()), Some(reply));
        }
    }

    #[test]
    fn a_line_without_an_address_is_not_a_reply() {
        assert_eq!(Reply::parse("hello\n"), None);
        assert_eq!(Reply::parse("web not-an-ip\n"), None);
    }
}
