//! Which service port serves each frontend when several claim it (an
//! external IP may be anyone's), with the nftables mode's rules: a cluster
//! IP claim wins (the API server allocates those, anyone may write an
//! external IP: CVE-2020-8554), then the previous owner keeps it, then the
//! first in name order.

use std::collections::HashMap;

use kproxy_model::{FrontendKind, ServicePort, ServicePortName};

use crate::desire::frontend_key;
use crate::maps::FrontendKey;

/// Every claim on every frontend, and the owners.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claims {
    /// In name order.
    claims: HashMap<FrontendKey, Vec<(ServicePortName, FrontendKind)>>,
    owners: HashMap<FrontendKey, ServicePortName>,
}

/// A port's claims: its frontends' keys and kinds.
pub(crate) fn claims_of(port: &ServicePort) -> Vec<(FrontendKey, FrontendKind)> {
    port.frontends.iter().map(|f| (frontend_key(f.ip, port.name.protocol, f.port), f.kind)).collect()
}

impl Claims {
    pub(crate) fn add(&mut self, name: &ServicePortName, claims: &[(FrontendKey, FrontendKind)]) {
        for (key, kind) in claims {
            let all = self.claims.entry(*key).or_default();
            match all.binary_search_by(|(n, _)| n.cmp(name)) {
                Ok(i) => all[i].1 = *kind,
                Err(i) => all.insert(i, (name.clone(), *kind)),
            }
        }
    }

    pub(crate) fn remove(&mut self, name: &ServicePortName, claims: &[(FrontendKey, FrontendKind)]) {
        for (key, _) in claims {
            if let Some(all) = self.claims.get_mut(key) {
                all.retain(|(n, _)| n != name);
                if all.is_empty() {
                    self.claims.remove(key);
                }
            }
        }
    }

    pub(crate) fn owner(&self, key: &FrontendKey) -> Option<&ServicePortName> {
        self.owners.get(key)
    }

    /// Chooses `key`'s owner after its claims changed, preferring
    /// `before`; returns it.
    pub(crate) fn settle(&mut self, key: FrontendKey, before: Option<&ServicePortName>) -> Option<ServicePortName> {
        let Some(all) = self.claims.get(&key) else {
            self.owners.remove(&key);
            return None;
        };
        let rank =
            |(name, kind): &(ServicePortName, FrontendKind)| (*kind != FrontendKind::ClusterIp, Some(name) != before);
        let owner = all.iter().min_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.0.cmp(&b.0))).map(|(n, _)| n.clone());
        match &owner {
            Some(o) => self.owners.insert(key, o.clone()),
            None => self.owners.remove(&key),
        };
        owner
    }

    /// Chooses every owner from scratch, keeping those of `previous` where
    /// the rules allow.
    pub(crate) fn settle_all(&mut self, previous: &Claims) {
        let keys: Vec<FrontendKey> = self.claims.keys().copied().collect();
        self.owners.clear();
        for key in keys {
            self.settle(key, previous.owner(&key));
        }
    }
}

#[cfg(test)]
mod tests {
    use kproxy_model::{Protocol, ServiceName};

    use super::*;

    fn name(s: &str) -> ServicePortName {
        ServicePortName::new(ServiceName::new("default", s), "http", Protocol::Tcp)
    }

    #[test]
    fn a_cluster_ip_claim_beats_an_external_ip_and_a_previous_owner_keeps_its_frontend() {
        let key = frontend_key("10.96.0.10".parse().expect("ip"), Protocol::Tcp, 80);
        let mut claims = Claims::default();
        claims.add(&name("a-thief"), &[(key, FrontendKind::ExternalIp)]);
        claims.add(&name("web"), &[(key, FrontendKind::ClusterIp)]);
        assert_eq!(claims.settle(key, Some(&name("a-thief"))), Some(name("web")));
        claims.remove(&name("web"), &[(key, FrontendKind::ClusterIp)]);
        claims.add(&name("b-other"), &[(key, FrontendKind::ExternalIp)]);
        assert_eq!(claims.settle(key, None), Some(name("a-thief")), "first in name order");
        claims.add(&name("0-newcomer"), &[(key, FrontendKind::ExternalIp)]);
        assert_eq!(claims.settle(key, Some(&name("a-thief"))), Some(name("a-thief")), "the owner keeps it");
        for n in ["a-thief", "b-other", "0-newcomer"] {
            claims.remove(&name(n), &[(key, FrontendKind::ExternalIp)]);
        }
        assert_eq!(claims.settle(key, None), None);
        assert_eq!(claims.owner(&key), None);
    }
}
