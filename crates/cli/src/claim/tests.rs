//! The claim layer against a fake route table: which addresses, only the
//! changes, adoption, failures one by one, and a refusal that stops it.

use std::sync::Mutex;

use kproxy_dataplane::{DryRun, SyncReport};
use kproxy_model::Changes;
use kproxy_state::StateConfig;
use kproxy_testkit::{Scenario, service};

use super::*;

/// The kernel as the fake sees it, shared with the test.
#[derive(Debug, Default)]
struct Table {
    /// kproxy's routes.
    claimed: BTreeSet<IpAddr>,
    interfaces: Vec<IpAddr>,
    /// Local by other means (another agent's route).
    local_otherwise: BTreeSet<IpAddr>,
    /// Adds that fail with this errno.
    failing: BTreeMap<IpAddr, i32>,
    /// Listing fails with this errno.
    list_fails: Option<i32>,
    /// Every add and delete, in order.
    calls: Vec<String>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Table>>);

impl Fake {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap()
    }

    fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.table().calls)
    }
}

const EPERM: i32 = 1;
const EINVAL: i32 = 22;

fn errno(errno: i32) -> NetlinkError {
    NetlinkError::Connect(std::io::Error::from_raw_os_error(errno))
}

impl RouteTable for Fake {
    async fn list(&mut self) -> Result<BTreeSet<IpAddr>, NetlinkError> {
        let table = self.table();
        match table.list_fails {
            Some(e) => Err(errno(e)),
            None => Ok(table.claimed.clone()),
        }
    }

    async fn interface_addresses(&mut self) -> Result<Vec<IpAddr>, NetlinkError> {
        Ok(self.table().interfaces.clone())
    }

    async fn add(&mut self, ip: IpAddr) -> Result<Claim, NetlinkError> {
        let mut table = self.table();
        table.calls.push(format!("add {ip}"));
        if let Some(e) = table.failing.get(&ip) {
            return Err(errno(*e));
        }
        if table.local_otherwise.contains(&ip) || table.interfaces.contains(&ip) || !table.claimed.insert(ip) {
            return Ok(Claim::AlreadyLocal);
        }
        Ok(Claim::Added)
    }

    async fn delete(&mut self, ip: IpAddr) -> Result<bool, NetlinkError> {
        let mut table = self.table();
        table.calls.push(format!("delete {ip}"));
        Ok(table.claimed.remove(&ip))
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

/// node-a on 192.168.77.1; `web` is a LoadBalancer with a cluster IP of
/// each family, an external IP, an ingress IP and a node port.
fn scenario() -> Scenario {
    let mut scenario = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        host_addresses: vec![ip("192.168.77.1")],
        endpoint_controller: true,
        ..StateConfig::default()
    });
    scenario.service(web());
    scenario.sync();
    scenario
}

fn web() -> k8s_openapi::api::core::v1::Service {
    service("default", "web")
        .type_("LoadBalancer")
        .cluster_ips(&["10.96.0.10", "fd00:96::10"])
        .port("http", "TCP", 80)
        .node_port(30080)
        .external_ips(&["203.0.113.7", "192.168.77.1"])
        .load_balancer_ingress("198.51.100.20", None)
        .build()
}

async fn sync<R: RouteTable>(claiming: &mut Claiming<DryRun, R>, state: &ProxyState, kind: SyncKind) -> SyncReport {
    let changes = Changes::default();
    claiming.sync(SyncRequest { state, changes: &changes, kind }).await.expect("a dry run never fails")
}

const WEB: [&str; 5] = ["10.96.0.10", "192.168.77.1", "198.51.100.20", "203.0.113.7", "fd00:96::10"];

#[test]
fn cluster_external_and_load_balancer_ips_are_wanted_but_not_node_ports() {
    let scenario = scenario();
    let node_ports =
        scenario.state().service_ports().flat_map(|p| &p.frontends).filter(|f| f.kind == FrontendKind::NodePort);
    assert!(node_ports.count() > 0, "the state has node ports");
    assert_eq!(wanted(scenario.state()), ips(&WEB));

    let mut scenario = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    scenario.service(service("default", "lo").cluster_ip("127.0.91.7").port("http", "TCP", 80).build());
    scenario.service(service("default", "sctp").cluster_ip("10.96.0.30").port("s", "SCTP", 80).build());
    scenario.sync();
    assert_eq!(wanted(scenario.state()), BTreeSet::new(), "loopback is local; SCTP is not served");
}

#[tokio::test]
async fn only_what_changed_is_added_or_deleted() {
    let fake = Fake::default();
    fake.table().interfaces = vec![ip("192.168.77.1"), ip("127.0.0.1")];
    let mut claiming = Claiming::new(DryRun, fake.clone());
    let mut scenario = scenario();

    let report = sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert_eq!(
        fake.take_calls(),
        ["add 10.96.0.10", "add 198.51.100.20", "add 203.0.113.7", "add fd00:96::10"],
        "the node's own address is not claimed"
    );
    assert!(report.summary.ends_with("; 4 addresses claimed"), "{}", report.summary);
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);

    sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(fake.take_calls().is_empty(), "nothing changed");

    scenario.service(service("default", "web").cluster_ips(&["10.96.0.11"]).port("http", "TCP", 80).build());
    scenario.sync();
    sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert_eq!(
        fake.take_calls(),
        ["delete 10.96.0.10", "delete 198.51.100.20", "delete 203.0.113.7", "delete fd00:96::10", "add 10.96.0.11"]
    );
    assert_eq!(fake.table().claimed, ips(&["10.96.0.11"]));
}

#[tokio::test]
async fn routes_of_an_earlier_run_are_adopted_and_kept_or_removed() {
    let fake = Fake::default();
    fake.table().claimed = ips(&["10.96.0.10", "10.96.0.77"]);
    let mut claiming = Claiming::new(DryRun, fake.clone());
    sync(&mut claiming, scenario().state(), SyncKind::Full).await;
    let calls = fake.take_calls();
    assert!(calls.contains(&"delete 10.96.0.77".to_owned()), "{calls:?}");
    assert!(!calls.iter().any(|c| c.ends_with(" 10.96.0.10")), "kept as it is: {calls:?}");
}

#[tokio::test]
async fn addresses_local_otherwise_are_not_kproxys_and_are_retried_on_full_syncs_only() {
    let fake = Fake::default();
    fake.table().local_otherwise = ips(&["203.0.113.7"]);
    let mut claiming = Claiming::new(DryRun, fake.clone());
    let scenario = scenario();
    sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert!(!fake.table().claimed.contains(&ip("203.0.113.7")));
    fake.take_calls();

    sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(fake.take_calls().is_empty());
    sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert_eq!(fake.take_calls(), ["add 203.0.113.7"]);

    // It stops being local: the next full sync claims it.
    fake.table().local_otherwise.clear();
    sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert_eq!(fake.take_calls(), ["add 203.0.113.7"]);
    assert!(fake.table().claimed.contains(&ip("203.0.113.7")));
}

#[tokio::test]
async fn one_failing_address_is_reported_once_and_the_others_are_claimed() {
    let fake = Fake::default();
    fake.table().failing.insert(ip("198.51.100.20"), EINVAL);
    let mut claiming = Claiming::new(DryRun, fake.clone());
    let scenario = scenario();

    let report = sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(report.skipped[0].starts_with("frontend address 198.51.100.20 not claimed: "), "{:?}", report.skipped);
    assert!(report.skipped[0].contains("Invalid argument"), "{:?}", report.skipped);
    assert_eq!(fake.table().claimed.len(), 4, "the others are claimed");

    let report = sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(report.skipped.is_empty(), "reported once: {:?}", report.skipped);
    assert!(fake.take_calls().ends_with(&["add 198.51.100.20".to_owned()]), "retried every sync");

    fake.table().failing.clear();
    sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(fake.table().claimed.contains(&ip("198.51.100.20")));
}

#[tokio::test]
async fn a_refusal_stops_claiming_and_the_sync_still_succeeds() {
    let fake = Fake::default();
    for address in WEB {
        fake.table().failing.insert(ip(address), EPERM);
    }
    let mut claiming = Claiming::new(DryRun, fake.clone());
    let scenario = scenario();
    let report = sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert!(report.skipped.is_empty(), "a refusal is one warning, not one per address: {:?}", report.skipped);
    assert_eq!(fake.take_calls().len(), 1, "the first refusal stops the rest");
    assert!(claiming.claims.is_none());
    sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert!(fake.take_calls().is_empty(), "never tried again");
}

#[tokio::test]
async fn nothing_is_claimed_before_kproxys_routes_could_be_listed() {
    let fake = Fake::default();
    fake.table().claimed = ips(&["10.96.0.77"]);
    fake.table().list_fails = Some(EINVAL);
    let mut claiming = Claiming::new(DryRun, fake.clone());
    let scenario = scenario();
    let report = sync(&mut claiming, scenario.state(), SyncKind::Full).await;
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(report.skipped[0].starts_with("cannot list kproxy's local routes: "), "{:?}", report.skipped);
    let report = sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(report.skipped.is_empty(), "reported once");
    assert!(fake.take_calls().is_empty(), "a leftover would look like someone else's");

    fake.table().list_fails = None;
    sync(&mut claiming, scenario.state(), SyncKind::Partial).await;
    assert!(fake.take_calls().contains(&"delete 10.96.0.77".to_owned()));
}

#[test]
fn plans_add_what_is_missing_and_delete_what_is_not_needed() {
    let plan = plan(
        &ips(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]),
        &ips(&["10.0.0.4"]),
        &ips(&["10.0.0.1", "10.0.0.4", "10.0.0.9"]),
        &ips(&["10.0.0.3"]),
    );
    assert_eq!(
        plan,
        Plan { add: vec![ip("10.0.0.2")], delete: vec![ip("10.0.0.4"), ip("10.0.0.9")] },
        "an address now on an interface is released"
    );
}
