//! ServiceCIDR (networking.k8s.io/v1) to [`ServiceCidrInfo`].

use k8s_openapi::api::networking::v1::ServiceCIDR;

use super::{Converted, Fields, InvalidObject};
use crate::event::Kind;
use crate::info::ServiceCidrInfo;

/// Validates a ServiceCIDR.
pub fn service_cidr(cidr: &ServiceCIDR) -> Result<ServiceCidrInfo, InvalidObject> {
    service_cidr_with_warnings(cidr).map(|c| c.value)
}

/// [`service_cidr`], with the fields read leniently.
pub fn service_cidr_with_warnings(cidr: &ServiceCIDR) -> Result<Converted<ServiceCidrInfo>, InvalidObject> {
    let f = Fields::of(Kind::ServiceCidr, &cidr.metadata)?;
    let cidrs = cidr
        .spec
        .iter()
        .flat_map(|s| s.cidrs.iter().flatten())
        .enumerate()
        .map(|(i, c)| f.cidr(format!("spec.cidrs[{i}]"), c))
        .collect::<Result<Vec<_>, _>>()?;
    let info = ServiceCidrInfo { name: f.key().name.to_string(), cidrs };
    Ok(f.finish(info))
}
