//! `KubeProxyConfiguration` v1alpha1 exactly as upstream puts it on the wire.
//!
//! Field names, types and the set of fields follow
//! `k8s.io/kube-proxy/config/v1alpha1/types.go`; nothing here is defaulted
//! or validated (see `defaults` and `resolve`). Go's decoder treats `null`
//! as "leave the zero value" for plain fields and as nil for pointers, so
//! plain fields read `null` as their default and pointer fields are
//! `Option`s. `metav1.Duration` is the exception: its decoder parses
//! `null` as `""` and fails, and [`GoDuration`] does the same.
//!
//! Serialising writes what upstream's encoder writes for the same values
//! (durations as Go duration strings, a whole `qps` as an integer), so a
//! written document reads back to the same configuration.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::GoDuration;
use crate::duration;

/// `kubeproxy.config.k8s.io/v1alpha1`, the only version upstream serves.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// The only kind this crate reads.
pub const KIND: &str = "KubeProxyConfiguration";

/// Reads `null` as the type's default, like Go does for non-pointer fields.
fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyConfiguration {
    /// Must be [`API_VERSION`].
    #[serde(deserialize_with = "or_default")]
    pub api_version: String,
    /// Must be [`KIND`].
    #[serde(deserialize_with = "or_default")]
    pub kind: String,
    /// Feature gate name to enabled.
    #[serde(deserialize_with = "or_default")]
    pub feature_gates: BTreeMap<String, bool>,
    /// How to reach the API server.
    #[serde(deserialize_with = "or_default")]
    pub client_connection: ClientConnectionConfiguration,
    /// component-base logging.
    #[serde(deserialize_with = "or_default")]
    pub logging: LoggingConfiguration,
    /// The node name to use instead of the host name.
    #[serde(deserialize_with = "or_default")]
    pub hostname_override: String,
    /// Overrides the node's primary IP; nothing binds to it.
    #[serde(deserialize_with = "or_default")]
    pub bind_address: String,
    /// `ip:port` of the health check server.
    #[serde(deserialize_with = "or_default")]
    pub healthz_bind_address: String,
    /// `ip:port` of the metrics server.
    #[serde(deserialize_with = "or_default")]
    pub metrics_bind_address: String,
    /// Exit instead of logging when a bind fails.
    #[serde(deserialize_with = "or_default")]
    pub bind_address_hard_fail: bool,
    /// Serve `/debug/pprof` on the metrics server.
    #[serde(deserialize_with = "or_default")]
    pub enable_profiling: bool,
    /// The previous minor version whose hidden metrics to show.
    #[serde(deserialize_with = "or_default")]
    pub show_hidden_metrics_for_version: String,
    /// `iptables`, `ipvs`, `nftables`, `kernelspace` (Windows), or empty.
    #[serde(deserialize_with = "or_default")]
    pub mode: String,
    /// iptables mode (masquerade bit and masquerade-all also in ipvs mode).
    #[serde(deserialize_with = "or_default")]
    pub iptables: KubeProxyIPTablesConfiguration,
    /// ipvs mode.
    #[serde(deserialize_with = "or_default")]
    pub ipvs: KubeProxyIPVSConfiguration,
    /// nftables mode.
    #[serde(deserialize_with = "or_default")]
    pub nftables: KubeProxyNFTablesConfiguration,
    /// Windows kernelspace mode.
    #[serde(deserialize_with = "or_default")]
    pub winkernel: KubeProxyWinkernelConfiguration,
    /// How to tell pod traffic from other traffic.
    #[serde(deserialize_with = "or_default")]
    pub detect_local_mode: String,
    /// Settings of the interface-based local-detection modes.
    #[serde(deserialize_with = "or_default")]
    pub detect_local: DetectLocalConfiguration,
    /// Comma-separated pod CIDRs, at most one per family.
    #[serde(rename = "clusterCIDR", deserialize_with = "or_default")]
    pub cluster_cidr: String,
    /// CIDRs whose addresses serve NodePorts, or just `primary`.
    #[serde(deserialize_with = "or_default")]
    pub node_port_addresses: Vec<String>,
    /// The process's OOM score adjustment.
    pub oom_score_adj: Option<i32>,
    /// conntrack sysctls.
    #[serde(deserialize_with = "or_default")]
    pub conntrack: KubeProxyConntrackConfiguration,
    /// Resync period of the API watches.
    pub config_sync_period: GoDuration,
    /// Unused upstream since the userspace proxy went away.
    #[serde(deserialize_with = "or_default")]
    pub port_range: String,
    /// Windows only: run as a Windows service.
    #[serde(deserialize_with = "or_default")]
    pub windows_run_as_service: bool,
}

/// `clientConnection` (component-base `ClientConnectionConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct ClientConnectionConfiguration {
    /// Path of the kubeconfig file; empty means in-cluster.
    #[serde(deserialize_with = "or_default")]
    pub kubeconfig: String,
    /// The `Accept` header.
    #[serde(deserialize_with = "or_default")]
    pub accept_content_types: String,
    /// The content type of requests.
    #[serde(deserialize_with = "or_default")]
    pub content_type: String,
    /// Client-side queries per second.
    #[serde(deserialize_with = "or_default", serialize_with = "go_float")]
    pub qps: f32,
    /// Client-side burst.
    #[serde(deserialize_with = "or_default")]
    pub burst: i32,
}

/// `logging` (component-base logs `LoggingConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct LoggingConfiguration {
    /// `text` or `json`.
    #[serde(deserialize_with = "or_default")]
    pub format: String,
    /// How often to flush logs: nanoseconds as a number, or a duration string.
    #[serde(deserialize_with = "or_default")]
    pub flush_frequency: FlushFrequency,
    /// klog verbosity.
    #[serde(deserialize_with = "or_default")]
    pub verbosity: u32,
    /// Per-file verbosity overrides.
    #[serde(deserialize_with = "or_default")]
    pub vmodule: Vec<VModuleItem>,
    /// Format-specific options.
    #[serde(deserialize_with = "or_default")]
    pub options: FormatOptions,
}

/// `logging.flushFrequency`: unlike `metav1.Duration` it also takes a number
/// of nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlushFrequency(pub GoDuration);

impl<'de> Deserialize<'de> for FlushFrequency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FlushVisitor;

        impl Visitor<'_> for FlushVisitor {
            type Value = FlushFrequency;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("nanoseconds as an integer, or a duration string such as \"5s\"")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FlushFrequency, E> {
                Ok(FlushFrequency(GoDuration::from_nanos(v)))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FlushFrequency, E> {
                i64::try_from(v)
                    .map(|n| FlushFrequency(GoDuration::from_nanos(n)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<FlushFrequency, E> {
                duration::parse(v).map(FlushFrequency).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(FlushVisitor)
    }
}

impl Serialize for FlushFrequency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Go's encoder writes a whole float32 without a fraction (`5`, not `5.0`).
fn go_float<S: Serializer>(v: &f32, serializer: S) -> Result<S::Ok, S::Error> {
    // f32 holds every integer up to 2^24 exactly; beyond that, or with a
    // fraction, it stays a float.
    if v.fract() == 0.0 && v.abs() < 16_777_216.0 {
        #[allow(clippy::cast_possible_truncation)]
        return serializer.serialize_i64(*v as i64);
    }
    serializer.serialize_f64(f64::from(*v))
}

/// One `logging.vmodule` entry.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct VModuleItem {
    /// Glob of source file names.
    #[serde(deserialize_with = "or_default")]
    pub file_pattern: String,
    /// Verbosity for matching files.
    #[serde(deserialize_with = "or_default")]
    pub verbosity: u32,
}

/// `logging.options`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, expecting = "a mapping")]
pub struct FormatOptions {
    /// Options of the text format.
    #[serde(deserialize_with = "or_default")]
    pub text: OutputRoutingOptions,
    /// Options of the JSON format.
    #[serde(deserialize_with = "or_default")]
    pub json: OutputRoutingOptions,
}

/// `logging.options.text` and `logging.options.json`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct OutputRoutingOptions {
    /// Write info messages to stdout and errors to stderr.
    #[serde(deserialize_with = "or_default")]
    pub split_stream: bool,
    /// A `resource.Quantity` (`"0"`, `"64Ki"`, or a number), kept as text.
    #[serde(deserialize_with = "or_default")]
    pub info_buffer_size: Quantity,
}

/// A Kubernetes `resource.Quantity`, kept as its text; not interpreted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;

        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as \"0\" or \"64Ki\"")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.to_owned()))
            }
        }

        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// A zero quantity is written as `"0"`, as upstream writes it.
impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if self.0.is_empty() { "0" } else { &self.0 })
    }
}

/// `iptables`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyIPTablesConfiguration {
    /// The fwmark bit for packets to masquerade (iptables and ipvs), 0-31.
    pub masquerade_bit: Option<i32>,
    /// Masquerade all service traffic (iptables and ipvs).
    #[serde(deserialize_with = "or_default")]
    pub masquerade_all: bool,
    /// Serve NodePorts on 127.0.0.1 (route_localnet).
    pub localhost_node_ports: Option<bool>,
    /// Full resync period.
    pub sync_period: GoDuration,
    /// Shortest time between syncs.
    pub min_sync_period: GoDuration,
}

/// `ipvs`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyIPVSConfiguration {
    /// Full resync period.
    pub sync_period: GoDuration,
    /// Shortest time between syncs.
    pub min_sync_period: GoDuration,
    /// IPVS scheduler; empty means `rr`.
    #[serde(deserialize_with = "or_default")]
    pub scheduler: String,
    /// CIDRs of IPVS services kube-proxy must not clean up.
    #[serde(rename = "excludeCIDRs", deserialize_with = "or_default")]
    pub exclude_cidrs: Vec<String>,
    /// Set arp_ignore/arp_announce.
    #[serde(rename = "strictARP", deserialize_with = "or_default")]
    pub strict_arp: bool,
    /// IPVS TCP idle timeout; 0 leaves it alone.
    pub tcp_timeout: GoDuration,
    /// IPVS TCP FIN_WAIT timeout; 0 leaves it alone.
    pub tcp_fin_timeout: GoDuration,
    /// IPVS UDP timeout; 0 leaves it alone.
    pub udp_timeout: GoDuration,
}

/// `nftables`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyNFTablesConfiguration {
    /// The fwmark bit for packets to masquerade, 0-31.
    pub masquerade_bit: Option<i32>,
    /// Masquerade all service traffic.
    #[serde(deserialize_with = "or_default")]
    pub masquerade_all: bool,
    /// Full resync period.
    pub sync_period: GoDuration,
    /// Shortest time between syncs.
    pub min_sync_period: GoDuration,
}

/// `winkernel` (Windows only).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyWinkernelConfiguration {
    /// HNS network name.
    #[serde(deserialize_with = "or_default")]
    pub network_name: String,
    /// Source VIP of the overlay.
    #[serde(deserialize_with = "or_default")]
    pub source_vip: String,
    /// Direct server return.
    #[serde(rename = "enableDSR", deserialize_with = "or_default")]
    pub enable_dsr: bool,
    /// HNS endpoint on the host.
    #[serde(deserialize_with = "or_default")]
    pub root_hns_endpoint_name: String,
    /// Forward the service VIP for health checks.
    #[serde(deserialize_with = "or_default")]
    pub forward_health_check_vip: bool,
}

/// `detectLocal`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct DetectLocalConfiguration {
    /// Bridge of pod traffic in `BridgeInterface` mode.
    #[serde(deserialize_with = "or_default")]
    pub bridge_interface: String,
    /// Prefix of pod interfaces in `InterfaceNamePrefix` mode.
    #[serde(deserialize_with = "or_default")]
    pub interface_name_prefix: String,
}

/// `conntrack`. A zero means "leave the sysctl alone".
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields, expecting = "a mapping")]
pub struct KubeProxyConntrackConfiguration {
    /// Entries per CPU core; 0 leaves the limit and ignores `min`.
    pub max_per_core: Option<i32>,
    /// Lower bound of the limit.
    pub min: Option<i32>,
    /// Idle timeout of ESTABLISHED TCP entries.
    pub tcp_established_timeout: Option<GoDuration>,
    /// Timeout of CLOSE_WAIT TCP entries.
    pub tcp_close_wait_timeout: Option<GoDuration>,
    /// Set nf_conntrack_tcp_be_liberal.
    #[serde(deserialize_with = "or_default")]
    pub tcp_be_liberal: bool,
    /// Timeout of UNREPLIED UDP entries.
    pub udp_timeout: GoDuration,
    /// Timeout of ASSURED UDP entries.
    pub udp_stream_timeout: GoDuration,
}
