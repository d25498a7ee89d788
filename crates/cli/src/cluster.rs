//! One list of the cluster's objects, for `state`, `trace` and `render`
//! with `--kubeconfig`: the API source `run` watches (same selectors, same
//! conversion), stopped once it has listed everything.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kproxy_config::Config;
use kproxy_source::kube::{HealthSink, KubeMetrics, KubeOptions, KubeSource, Resource};
use kproxy_state::SourceEvent;
use tokio::sync::mpsc;

/// How long the whole list may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Every object the API source gives `node` on its first complete list,
/// in arrival order, ending with `Synced`.
pub async fn list(config: &Config, node: &str) -> anyhow::Result<Vec<SourceEvent>> {
    let errors = Arc::new(LastError::default());
    let sink: Arc<dyn HealthSink> = errors.clone();
    let (client, url) = kproxy_source::kube::client(&crate::setup::connection(config), sink.clone()).await?;
    let service_cidrs = kproxy_source::kube::check(&client, &url, node, LIST_TIMEOUT).await?;
    let options = KubeOptions { service_cidrs, ..KubeOptions::new(node) };
    let source = KubeSource::new(client, options, KubeMetrics::default(), sink);
    let (tx, mut rx) = mpsc::channel(1024);
    let task = tokio::spawn(source.run(tx));
    let mut events = Vec::new();
    let listed = tokio::time::timeout(LIST_TIMEOUT, async {
        while let Some(event) = rx.recv().await {
            let synced = matches!(event, SourceEvent::Synced);
            events.push(event);
            if synced {
                return true;
            }
        }
        false
    })
    .await;
    task.abort();
    match listed {
        Ok(true) => Ok(events),
        _ => {
            let cause = errors.0.lock().expect("error lock").clone().unwrap_or_else(|| "no answer".into());
            anyhow::bail!("{url}: the objects were not all listed within {LIST_TIMEOUT:?}: {cause}")
        }
    }
}

/// The last list or watch failure, for the error message.
#[derive(Default)]
struct LastError(Mutex<Option<String>>);

impl HealthSink for LastError {
    fn lost(&self, resource: Resource, error: String) {
        *self.0.lock().expect("error lock") = Some(format!("{}: {error}", resource.as_str()));
    }

    fn recovered(&self, _: Resource) {}
}
