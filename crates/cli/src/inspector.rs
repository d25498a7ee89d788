//! The running kproxy's answers to `kproxy trace`, `render` and `state`
//! asked on the node (`/trace`, `/render`, `/state/table`): the state of
//! the last sync that applied, through the same [`Rules`] and explanation
//! the commands use with `--manifests`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kproxy_admin::{Inspect, InspectError, TraceQuery};
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
}

impl Inspector {
    /// For a kproxy programming `programmed` (`None`: a dry run) with
    /// `config`, reading what it applied from `applied`.
    pub fn new(
        config: &Config,
        programmed: Option<ProxyMode>,
        applied: watch::Receiver<Option<Arc<ProxyState>>>,
    ) -> Self {
        let rules = match programmed {
            Some(mode) => Rules::of(mode, config).map_err(|e| format!("{mode} mode: {e:#}")),
            None => Err(format!(
                "this kproxy programs nothing (a dry run): there are no applied rules; {}",
                "plan them with --manifests or --kubeconfig and --proxy-mode"
            )),
        };
        Self { rules, applied }
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

    fn state_table(&self) -> Result<String, InspectError> {
        let state = self.applied.borrow().clone();
        let state = state.ok_or_else(|| InspectError::Unsupported("no sync has applied yet; ask again".into()))?;
        Ok(crate::table::render(&state, &BTreeMap::new()))
    }
}
