//! `kproxy run`: source, state, runner, dataplane and admin wired together.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_admin::{
    AdminState, Health, HealthChecks, Metrics, SystemClock, configz_router, health_router, metrics_router,
    serve_health_checks,
};
use kproxy_config::{Config, ProxyMode};
use kproxy_dataplane::{Dataplane, Runner, RunnerConfig, RunnerHandles};
use kproxy_model::{ModeSupport, ProxyState};
use kproxy_source::kube::{ConnectError, Connection, HealthSink, KubeMetrics, KubeOptions, KubeSource, Resource};
use kproxy_source::manifests::{Folder, ManifestSource, SourceCounters, WatchOptions};
use kproxy_state::StateBuilder;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::UsageError;
use crate::args::RunArgs;
use crate::setup::{connection, state_config};

/// Logs to stderr, as text or one JSON object per line (`logging.format`,
/// see [`crate::logging`]).
pub fn init_logging(logging: &kproxy_config::Logging) {
    crate::logging::init(logging);
}

/// Where the objects come from.
enum Source {
    /// Standalone: a folder of manifests, with kproxy's endpoint controller.
    Manifests(Folder),
    /// In a cluster: the API server.
    Kube(Connection),
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let loaded = crate::setup::load(&args.common)?;
    if let Some(path) = &args.write_config_to {
        return crate::config_out::write(path, &loaded, &args.common.flags);
    }
    let configz = kproxy_config::configz(&loaded.document);
    let config = loaded.config;
    if args.cleanup {
        return crate::cleanup_cmd::everything(&config);
    }
    let source = match &args.common.manifests {
        Some(dir) => Source::Manifests(Folder::new(dir).map_err(|e| UsageError(format!("--manifests {e}")))?),
        None => Source::Kube(connection(&config)),
    };
    let mode = crate::mode::choose(&config, args.dry_run)?;
    if mode.is_some() {
        crate::coexist::refuse_kube_proxy(&config)?;
    }
    // A dry run computes what the configured mode would program.
    let semantics = mode.or(config.mode);
    crate::setup::check_node_port_addresses(&config, semantics);
    crate::setup::check_local_detection(&config);
    // Before the mode is built: the nftables planner reads tcp_be_liberal.
    crate::kernel_settings::apply(&config, mode);
    let dataplane = crate::mode::dataplane(&config, mode)?;
    let support = crate::mode::support(&config, mode)?;
    // A dry run reports what the configured mode would leave out.
    let not_programmed = crate::not_programmed::for_mode(&config, semantics)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The mode whose rules this process programs: what other modes left
    // goes once they are in (without root there is nothing to remove).
    let programmed = mode.filter(|_| crate::mode::is_root());
    let modes = Modes { semantics, programmed, running: mode, support, not_programmed };
    runtime.block_on(serve(config, configz, source, dataplane, modes, args.once))
}

/// The mode whose semantics the state follows (a dry run: the configured
/// one), the mode that programs this node (none in a dry run), and what
/// that mode does of kproxy's annotations.
#[derive(Clone)]
struct Modes {
    semantics: Option<ProxyMode>,
    programmed: Option<ProxyMode>,
    /// The mode running (none in a dry run): its metrics are registered,
    /// and `/trace` and `/render` answer with its rules.
    running: Option<ProxyMode>,
    support: ModeSupport,
    /// For `/state`: what the running mode's planner leaves out.
    not_programmed: Arc<dyn kproxy_admin::NotProgrammed>,
}

async fn serve(
    config: Config,
    configz: String,
    source: Source,
    dataplane: Box<dyn Dataplane>,
    modes: Modes,
    once: bool,
) -> anyhow::Result<ExitCode> {
    let host_addresses = crate::host::addresses(modes.semantics).await;
    let mut state_config = state_config(&config, host_addresses, modes.semantics, modes.support);
    if matches!(source, Source::Kube(_)) {
        // The cluster's controller writes the EndpointSlices, and the Node
        // always exists: one that does not is not this node's.
        state_config.endpoint_controller = false;
        state_config.node_required = true;
    }
    let node = state_config.node_name.clone();
    match &source {
        Source::Manifests(folder) => {
            info!(%node, mode = dataplane.mode(), manifests = %folder.dir().display(), "starting")
        }
        Source::Kube(_) => info!(%node, mode = dataplane.mode(), "starting; reading the Kubernetes API"),
    }

    let mut metrics = Metrics::for_mode(modes.running, &build_info());
    let kube_metrics = KubeMetrics::default();
    metrics.register(|registry| kube_metrics.register(registry));
    metrics.register(|registry| dataplane.register_metrics(registry));
    let metrics = Arc::new(metrics);
    let health = Arc::new(Health::new(config.sync_period * 2));
    let (events_tx, events) = mpsc::channel(1024);
    let origin = if matches!(source, Source::Kube(_)) { "API server" } else { "manifests" };
    let events = crate::node_check::follow(events, config.hostname_override.as_deref(), origin);
    let source = match source {
        Source::Manifests(folder) => {
            let counters = SourceCounters {
                invalid_documents: metrics.manifest_invalid_documents.clone(),
                reads: metrics.manifest_reads.clone(),
            };
            let source = ManifestSource::new(folder, watch_options(config.min_sync_period), counters);
            tokio::spawn(async move { source.run(events_tx).await.map_err(anyhow::Error::from) })
        }
        Source::Kube(connection) => {
            let sink: Arc<dyn HealthSink> = Arc::new(SourceHealth(health.clone()));
            let (client, url) = kproxy_source::kube::client(&connection, sink.clone()).await.map_err(startup)?;
            let service_cidrs =
                kproxy_source::kube::check(&client, &url, &node, API_CHECK_TIMEOUT).await.map_err(startup)?;
            info!(%url, "API server answers");
            let options = KubeOptions { service_cidrs, ..KubeOptions::new(node) };
            let source = KubeSource::new(client, options, kube_metrics, sink);
            tokio::spawn(async move {
                source.run(events_tx).await;
                Ok(())
            })
        }
    };

    let (state_tx, state_rx) = watch::channel(Arc::new(ProxyState::default()));
    let applied = watch::Sender::new(None);
    // Modes without their own listing list the state, saying what their
    // rules masquerade.
    let listing = dataplane.listing().or_else(|| Some(crate::forwarding::state_listing(&config, state_rx.clone())));
    let admin = Arc::new(AdminState {
        health: health.clone(),
        metrics: metrics.clone(),
        state: state_rx,
        mode: dataplane.mode().to_owned(),
        clock: Arc::new(SystemClock),
        listing,
        not_programmed: Some(modes.not_programmed.clone()),
    });
    if !once {
        if let Some(addr) = config.healthz_bind_address {
            listen(addr, health_router(admin.clone()), "healthz", config.bind_address_hard_fail).await?;
        }
        if let Some(addr) = config.metrics_bind_address {
            let inspector = Arc::new(crate::inspector::Inspector::new(
                &config,
                modes.running,
                applied.subscribe(),
                &admin.mode,
                modes.not_programmed.clone(),
            ));
            let router = metrics_router(admin.clone())
                .merge(kproxy_admin::inspect_router(inspector))
                .merge(configz_router(configz));
            listen(addr, router, "metrics", config.bind_address_hard_fail).await?;
        }
    }

    let health_checks = Arc::new(HealthChecks::default());
    // A dry run programs nothing, and answers no load balancer either.
    if !once && dataplane.mode() != "dry-run" {
        let state = state_tx.subscribe();
        tokio::spawn(serve_health_checks(health_checks.clone(), health.clone(), Arc::new(SystemClock), state));
    }
    let runner_config = RunnerConfig::new(config.min_sync_period, config.sync_period);
    let handles = RunnerHandles { health, metrics, state: state_tx, clock: Arc::new(SystemClock), health_checks };
    let mut runner =
        Runner::new(runner_config, StateBuilder::new(state_config), dataplane, handles).on_applied(applied);
    if once {
        let result = runner.run_once(events).await;
        // Wait until the source has stopped: a task still being polled on
        // another worker while the runtime drops panics on its timer ("A
        // Tokio 1.x context was found, but it is being shutdown").
        source.abort();
        let _ = source.await;
        return match result {
            Ok(()) => {
                if let Some(mode) = modes.programmed {
                    crate::leftovers::remove_at_start(mode, &config).await;
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                error!(error = %e, "sync failed");
                Ok(ExitCode::FAILURE)
            }
        };
    }
    if let Some(mode) = modes.programmed {
        // Another proxy's rules go once this one's are in: the node is
        // never without rules, and stale ones stop taking traffic.
        let (done, first_sync) = tokio::sync::oneshot::channel();
        runner = runner.on_first_sync(done);
        let config = config.clone();
        tokio::spawn(async move {
            if first_sync.await.is_ok() {
                crate::leftovers::remove_at_start(mode, &config).await;
            }
        });
    }
    let source_failed = async {
        match source.await {
            Ok(Err(e)) => error!(error = %e, "source failed"),
            Ok(Ok(())) => {}
            Err(e) => error!(error = %e, "source stopped"),
        }
    };
    tokio::select! {
        () = runner.run(events, shutdown_signal()) => {}
        () = source_failed => return Ok(ExitCode::FAILURE),
    }
    Ok(ExitCode::SUCCESS)
}

/// This build, for `kubernetes_build_info` (the build script sets the
/// commit and date when it knows them).
fn build_info() -> kproxy_admin::metrics::BuildInfo {
    kproxy_admin::metrics::BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        git_commit: option_env!("KPROXY_GIT_COMMIT").unwrap_or("unknown").into(),
        build_date: option_env!("KPROXY_BUILD_DATE").unwrap_or("unknown").into(),
    }
}

/// A folder that keeps changing is read at least once per `minSyncPeriod`
/// (kproxy would not sync more often anyway); with `minSyncPeriod: 0`, once
/// per debounce, so an editor's save still settles before it is read.
fn watch_options(min_sync_period: Duration) -> WatchOptions {
    let defaults = WatchOptions::default();
    WatchOptions { max_wait: min_sync_period.max(defaults.debounce), ..defaults }
}

/// A configuration mistake is a usage error (exit 64); a server that
/// refuses or does not answer is a failure (exit 1).
fn startup(e: ConnectError) -> anyhow::Error {
    match e {
        ConnectError::Refused { .. } | ConnectError::Unreachable { .. } => anyhow::Error::new(e),
        _ => UsageError(e.to_string()).into(),
    }
}

/// How long the API server may take to answer the startup check.
const API_CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// The Kubernetes source's watch failures, told to `/healthz`.
struct SourceHealth(Arc<Health>);

impl HealthSink for SourceHealth {
    fn lost(&self, resource: Resource, error: String) {
        self.0.source_lost(resource.as_str(), Instant::now(), error);
    }

    fn recovered(&self, resource: Resource) {
        self.0.source_recovered(resource.as_str());
    }
}

/// Binds an admin server. A failed bind ends kproxy under
/// `bindAddressHardFail`, and is logged otherwise.
async fn listen(addr: SocketAddr, router: axum::Router, what: &str, hard_fail: bool) -> anyhow::Result<()> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            info!(%addr, server = what, "listening");
            tokio::spawn(async move { axum::serve(listener, router).await });
            Ok(())
        }
        Err(e) if hard_fail => Err(e).with_context(|| format!("{what} server: cannot listen on {addr}")),
        Err(e) => {
            error!(%addr, server = what, error = %e, "cannot listen; continuing without it");
            Ok(())
        }
    }
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops kproxy");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changing_folder_is_read_at_least_once_per_min_sync_period_and_never_faster_than_the_debounce() {
        assert_eq!(watch_options(Duration::from_secs(5)).max_wait, Duration::from_secs(5));
        assert_eq!(watch_options(Duration::ZERO).max_wait, WatchOptions::default().debounce);
    }
}
