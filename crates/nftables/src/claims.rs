//! Which port serves each frontend: every port claiming a frontend, and
//! the owner of the few frontends several ports claim. Kept between syncs
//! for partial plans, so kept small: a frontend with one claimant (nearly
//! all of them) is one name and its kind, and its owner is that claimant.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use kproxy_model::{Frontend, FrontendKind, ServicePort, ServicePortName};

use crate::plan::FrontendKey;

/// A frontend as the kernel keys it.
pub(crate) fn frontend_key(port: &ServicePort, f: &Frontend) -> FrontendKey {
    (f.ip, port.name.protocol, f.port)
}

/// The ports claiming one frontend, with the kind each claims it as.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Claimants {
    One(ServicePortName, FrontendKind),
    /// In name order.
    Many(Vec<(ServicePortName, FrontendKind)>),
}

impl Claimants {
    fn iter(&self) -> impl Iterator<Item = (&ServicePortName, FrontendKind)> {
        let (one, many) = match self {
            Claimants::One(name, kind) => (Some((name, *kind)), &[][..]),
            Claimants::Many(all) => (None, all.as_slice()),
        };
        one.into_iter().chain(many.iter().map(|(name, kind)| (name, *kind)))
    }

    /// Adds or updates `name`'s claim.
    fn insert(&mut self, name: &ServicePortName, kind: FrontendKind) {
        let mut all = match std::mem::replace(self, Claimants::Many(Vec::new())) {
            Claimants::One(n, k) => vec![(n, k)],
            Claimants::Many(all) => all,
        };
        match all.binary_search_by(|(n, _)| n.cmp(name)) {
            Ok(i) => all[i].1 = kind,
            Err(i) => all.insert(i, (name.clone(), kind)),
        }
        *self = Self::from_vec(all).expect("just inserted one");
    }

    /// Removes `name`'s claim; `None` when none is left.
    fn remove(self, name: &ServicePortName) -> Option<Self> {
        match self {
            Claimants::One(n, _) if n == *name => None,
            Claimants::One(..) => Some(self),
            Claimants::Many(mut all) => {
                all.retain(|(n, _)| n != name);
                Self::from_vec(all)
            }
        }
    }

    fn from_vec(mut all: Vec<(ServicePortName, FrontendKind)>) -> Option<Self> {
        match all.len() {
            0 => None,
            1 => all.pop().map(|(n, k)| Claimants::One(n, k)),
            _ => Some(Claimants::Many(all)),
        }
    }

    /// Who serves the frontend. A cluster IP beats any other kind of
    /// claim: the API server allocates cluster IPs and never twice, while
    /// anyone may write an external IP (CVE-2020-8554). Then the previous
    /// owner keeps it, so a newcomer never takes over a running service;
    /// then the first in name order.
    fn choose(&self, previous: Option<&ServicePortName>) -> ServicePortName {
        let rank =
            |(name, kind): (&ServicePortName, FrontendKind)| (kind != FrontendKind::ClusterIp, Some(name) != previous);
        let (owner, _) =
            self.iter().min_by(|a, b| rank(*a).cmp(&rank(*b)).then_with(|| a.0.cmp(b.0))).expect("never empty");
        owner.clone()
    }
}

/// Every port's claims on the frontends of one family, and their owners.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claims {
    claims: HashMap<FrontendKey, Claimants>,
    /// The owner of each frontend several ports claim.
    contested: HashMap<FrontendKey, ServicePortName>,
}

impl Claims {
    /// `port`'s claims on its frontends (owners are settled separately).
    pub(crate) fn add(&mut self, port: &ServicePort) {
        for f in &port.frontends {
            match self.claims.entry(frontend_key(port, f)) {
                Entry::Vacant(slot) => {
                    slot.insert(Claimants::One(port.name.clone(), f.kind));
                }
                Entry::Occupied(mut slot) => slot.get_mut().insert(&port.name, f.kind),
            }
        }
    }

    /// Takes back `port`'s claims, as they were added.
    pub(crate) fn remove(&mut self, port: &ServicePort) {
        for f in &port.frontends {
            let key = frontend_key(port, f);
            if let Some(claimants) = self.claims.remove(&key)
                && let Some(left) = claimants.remove(&port.name)
            {
                self.claims.insert(key, left);
            }
        }
    }

    /// Who serves `key` now.
    pub(crate) fn owner(&self, key: &FrontendKey) -> Option<&ServicePortName> {
        match self.claims.get(key)? {
            Claimants::One(name, _) => Some(name),
            Claimants::Many(_) => self.contested.get(key),
        }
    }

    /// Chooses the owner of every contested frontend, keeping those of
    /// `previous` where the rules allow.
    pub(crate) fn settle_all(&mut self, previous: Option<&Claims>) {
        self.contested.clear();
        for (key, claimants) in &self.claims {
            if let Claimants::Many(_) = claimants {
                let before = previous.and_then(|p| p.owner(key));
                self.contested.insert(*key, claimants.choose(before));
            }
        }
    }

    /// Chooses the owner of `key` after its claims changed (`before`: its
    /// owner before), and returns it.
    pub(crate) fn settle(&mut self, key: FrontendKey, before: Option<&ServicePortName>) -> Option<ServicePortName> {
        match self.claims.get(&key) {
            None => {
                self.contested.remove(&key);
                None
            }
            Some(one @ Claimants::One(..)) => {
                self.contested.remove(&key);
                Some(one.choose(before))
            }
            Some(many) => {
                let owner = many.choose(before);
                self.contested.insert(key, owner.clone());
                Some(owner)
            }
        }
    }
}
