//! The fixed part of BENCHMARKS.md: how the numbers were made, how to
//! reproduce them, and what is not measured.

/// Appended to the report.
pub const METHOD: &str = "
## How to run

```sh
scripts/bench                   # full run (root; builds release first), 15-25 minutes
scripts/bench --quick           # at most 10k services, 3 runs each, under 3 minutes; the CI guard
scripts/bench --only userspace  # only the HAProxy comparison (about 4 minutes); keeps the rest
scripts/bench --only iptables   # only the iptables mode, both backends, 1k and 10k (a few minutes); keeps the rest
scripts/bench --only pacing     # only the sync pacing rounds (about 2 minutes); keeps the rest
scripts/bench --only ebpf       # only the ebpf mode against nftables and the pod IP (about 5 minutes); keeps the rest
```

`--quick` exits non-zero when the median cold sync at 10k services exceeds 5 s or the median one-service
change at 10k exceeds 100 ms. The raw numbers of the last run are in `target/bench/results.json`.
`target/release/kproxy-bench manifests --services N DIR` writes the workload as a manifest folder.
`--only userspace` measures kproxy's userspace mode against HAProxy alone and rewrites this file from
`target/bench/results.json`, replacing that section and the targets it feeds; every other section stays as the
last full run measured it; `--only iptables` does the same for the iptables mode, `--only pacing` for the
sync pacing, `--only ebpf` for the ebpf section (without `target/bench/results.json` it rewrites only that
section, its target row and this tail in the existing file, and writes its numbers to `target/bench/ebpf.json`).
`--quick` leaves out the ebpf section (it loads the programs at 100k services), the iptables mode (it needs
`iptables-legacy-restore` and `iptables-nft-restore`) and the sync pacing. The full run (not `--quick`) installs `haproxy` and `wrk` with apt when missing (`--only ebpf`: `wrk`).

## Method

- Each run is a worker process (`kproxy-bench worker`) started inside a fresh `kp-` network namespace
  (kproxy-sandbox `Netns`), so everything the dataplane does, `nft` children or netlink sockets, happens there;
  the namespace is deleted after the run. Nothing is loaded in the harness's own namespace.
- The workload is built with kproxy-testkit's builders, converted with `kproxy_state::convert` and folded with
  `kproxy_state::StateBuilder` (node-a, service CIDR 10.96.0.0/12, pods in 10.128.0.0/9). It is deterministic:
  every object is a function of its index. Node ports count up from 30000 (three services in ten have one),
  beyond the default node-port range at large N; kproxy does not care.
- Changes replace one endpoint of one service's EndpointSlice with a fresh address; the one-service changes
  touch TCP ClusterIP services.
- Upstream's layout is generated from the same `ProxyState` (IPv4 only, as the workload).

## Not measured

- IPv6, session affinity, source ranges and `rr`: the workload has none; each adds per-frontend elements
  (affinity adds per-endpoint chains and sets).
- Health-check node ports of Local load balancers: the workload sets no `healthCheckNodePort`, so the real
  binary opens no health-check listeners.
- The userspace mode with many services, UDP, or other schedulers than `rr`: the HAProxy comparison is one
  TCP service with two endpoints. Nor is it measured on a machine with spare cores for the load generator:
  wrk, the backends and the proxy share this one's.
- A real API server: the Kubernetes source is measured against kproxy-testkit's fake one on loopback, which
  answers at once; a real server's latency, TLS and rate limits (`clientConnection.qps`) are not in these numbers.
";
