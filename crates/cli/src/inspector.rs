//! The running kproxy's answers to `kproxy trace`, `render` and `state`
//! asked on the node (`/trace`, `/render`, `/applied`): the state of
//! the last sync that applied, through the same [`Rules`] and explanation
//! the commands use with `--manifests`.

use std::sync::Arc;

use kproxy_admin::{Inspect, InspectError, NotProgrammed, StateOutput, StateReport, TraceQuery};
use kproxy_config::{Config, ProxyMode};
use kproxy_model::ProxyState;
use tokio::sync::watch;

use crate::UsageError;
use crate::rules::Rules;

pub struct Inspector {
    /// The running mode's rules, or why it has none to show.
    rules: Result<Rules, String>,
    /// The state of the last sync that applied (`None` before the first).
    applied: watch::Receiver<Option<Arc<ProxyState>>>,
    /// The running dataplane's name, as `/proxyMode` says it.
    mode: String,
    /// What the mode leaves out of a state (`/state`'s `notProgrammed`).
    not_programmed: Arc<dyn NotProgrammed>,
}

impl Inspector {
    /// For a kproxy programming `programmed` (`None`: a dry run) with
    /// `config`, reading what it applied from `applied`; `/applied` is the
    /// document `/state` serves, for the dataplane named `mode`.
    pub fn new(
        config: &Config,
        programmed: Option<ProxyMode>,
        applied: watch::Receiver<Option<Arc<ProxyState>>>,
        mode: &str,
        not_programmed: Arc<dyn NotProgrammed>,
    ) -> Self {
        let rules = match programmed {
            Some(mode) => Rules::of(mode, config).map(|rules| rules.live(config)).map_err(|e| format!("{e:#}")),
            None => Err(format!(
                "this kproxy programs nothing (a dry run): there are no applied rules; {}",
                "plan them with --manifests or --kubeconfig and --proxy-mode"
            )),
        };
        Self { rules, applied, mode: mode.to_owned(), not_programmed }
    }

    fn applied(&self) -> Result<(&Rules, Arc<ProxyState>), InspectError> {
        let rules = self.rules.as_ref().map_err(|e| InspectError::Unsupported(e.clone()))?;
        let state = self.applied.borrow().clone();
        let state = state.ok_or_else(|| InspectError::Unsupported("no sync has applied yet; ask again".into()))?;
        Ok((rules, state))
    }
}

impl Inspect for Inspector {
    fn trace(&self, query: &TraceQuery) -> Result<String, InspectError> {
        let (rules, state) = self.applied()?;
        crate::trace_cmd::traced(rules, &state, query).map_err(|e| match e.downcast_ref::<UsageError>() {
            Some(usage) => InspectError::BadQuery(usage.to_string()),
            None => InspectError::Failed(format!("{e:#}")),
        })
    }

    fn render(&self) -> Result<String, InspectError> {
        let (rules, state) = self.applied()?;
        let rendered = rules.render(&state);
        let mut text = rendered.text;
        for skipped in &rendered.skipped {
            text.push_str(&format!("# not programmed: {skipped}\n"));
        }
        Ok(text)
    }

    fn state(&self, output: StateOutput) -> Result<String, InspectError> {
        let state = self.applied.borrow().clone();
        let state = state.ok_or_else(|| InspectError::Unsupported("no sync has applied yet; ask again".into()))?;
        let report = StateReport::new(&self.mode, &state, self.not_programmed.not_programmed(&state));
        match output {
            StateOutput::Table => Ok(crate::table::render(&report)),
            StateOutput::Json => serde_json::to_string_pretty(&report)
                .map(|json| json + "\n")
                .map_err(|e| InspectError::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use kproxy_state::{Object, SourceEvent, StateBuilder, StateConfig, convert};
    use kproxy_testkit::{EndpointBuilder as Ep, service, slice};

    use super::*;

    /// default/web on 10.96.0.10:80 with one endpoint, as a sync applied it.
    fn applied() -> Arc<ProxyState> {
        let mut builder = StateBuilder::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
        let svc = service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build();
        builder.apply(SourceEvent::Apply(Object::service(convert::service(&svc).unwrap())));
        let sl = slice("default", "web-1", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.244.1.5")).build();
        builder.apply(SourceEvent::Apply(convert::endpoint_slice(&sl).unwrap()));
        builder.apply(SourceEvent::Synced);
        builder.take_changes();
        Arc::new(builder.state().clone())
    }

    fn inspector(mode: Option<ProxyMode>, rx: watch::Receiver<Option<Arc<ProxyState>>>) -> Inspector {
        let config = Config::default();
        let name = mode.map_or("dry-run", ProxyMode::as_str);
        let not_programmed = crate::not_programmed::for_mode(&config, mode).unwrap();
        Inspector::new(&config, mode, rx, name, not_programmed)
    }

    fn query(to: &str) -> TraceQuery {
        TraceQuery { from: "10.244.2.9".parse().unwrap(), to: to.into(), iif: Some("cni0".into()) }
    }

    fn refusal(result: Result<String, InspectError>) -> String {
        match result {
            Err(InspectError::Unsupported(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn traces_walk_the_applied_state_in_the_running_mode() {
        let (tx, rx) = watch::channel(None);
        let inspector = inspector(Some(ProxyMode::Iptables), rx);
        assert_eq!(refusal(inspector.trace(&query("10.96.0.10:80"))), "no sync has applied yet; ask again");
        tx.send_replace(Some(applied()));
        let text = inspector.trace(&query("10.96.0.10:80")).unwrap();
        assert!(text.contains("verdict   DNAT to 10.244.1.5:8080\n"), "{text}");
        assert!(text.contains("  nat: -A KUBE-SERVICES "), "the iptables payload's rules: {text}");
        assert!(inspector.render().unwrap().starts_with("# IPv4: iptables-restore --noflush\n"));
        assert!(matches!(inspector.trace(&query("10.96.0.10")), Err(InspectError::BadQuery(_))));
    }

    #[test]
    fn a_userspace_or_dry_run_kproxy_refuses_to_trace_and_render_but_shows_its_state() {
        let (_tx, rx) = watch::channel(Some(applied()));
        let userspace = inspector(Some(ProxyMode::Userspace), rx.clone());
        assert!(refusal(userspace.trace(&query("10.96.0.10:80"))).contains("programs no kernel rules"));
        assert!(refusal(userspace.render()).contains("programs no kernel rules"));
        let dry_run = inspector(None, rx);
        assert!(refusal(dry_run.trace(&query("10.96.0.10:80"))).contains("programs nothing (a dry run)"));
        assert!(dry_run.state(StateOutput::Table).unwrap().contains("default/web"));
        let json: serde_json::Value = serde_json::from_str(&dry_run.state(StateOutput::Json).unwrap()).unwrap();
        assert_eq!(json["node"]["name"], "node-a");
        assert_eq!(json["mode"], "dry-run");
    }
}
