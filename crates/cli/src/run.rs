//! `kproxy run`: source, state, runner, dataplane and admin wired together.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use kproxy_admin::{
    AdminState, Health, HealthChecks, Metrics, SystemClock, health_router, metrics_router, serve_health_checks,
};
use kproxy_config::Config;
use kproxy_dataplane::{Dataplane, Runner, RunnerConfig, RunnerHandles};
use kproxy_model::ProxyState;
use kproxy_source::manifests::{Folder, ManifestSource, SourceCounters, WatchOptions};
use kproxy_state::StateBuilder;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::UsageError;
use crate::args::RunArgs;
use crate::setup::{load_config, manifests_dir, state_config};

/// Logs to stderr, as text or one JSON object per line (`logging.format`).
/// `-v` follows klog's habit: 0-1 info, 2-3 debug, 4+ trace; `RUST_LOG`
/// overrides.
pub fn init_logging(logging: &kproxy_config::Logging) {
    let level = match logging.verbosity {
        0..=1 => "info",
        2..=3 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("warn,kproxy={level}")));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second initialisation (tests) keeps the first subscriber.
    let _ = match logging.format {
        kproxy_config::LogFormat::Json => builder.json().try_init(),
        kproxy_config::LogFormat::Text => {
            builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init()
        }
    };
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    let dir = manifests_dir(&args.common)?;
    let folder = Folder::new(dir).map_err(|e| UsageError(format!("--manifests {e}")))?;
    let mode = crate::mode::choose(&config, args.dry_run)?;
    let dataplane = crate::mode::dataplane(&config, mode);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve(config, folder, dataplane, args.once))
}

async fn serve(config: Config, folder: Folder, dataplane: Box<dyn Dataplane>, once: bool) -> anyhow::Result<ExitCode> {
    let host_addresses = crate::host::addresses().await;
    let state_config = state_config(&config, dataplane_mode(&*dataplane), host_addresses);
    info!(node = %state_config.node_name, mode = dataplane.mode(), manifests = %folder.dir().display(), "starting");

    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new(config.sync_period * 2));
    let (state_tx, state_rx) = watch::channel(Arc::new(ProxyState::default()));
    let admin = Arc::new(AdminState {
        health: health.clone(),
        metrics: metrics.clone(),
        state: state_rx,
        mode: dataplane.mode().to_owned(),
        clock: Arc::new(SystemClock),
    });
    if !once {
        if let Some(addr) = config.healthz_bind_address {
            listen(addr, health_router(admin.clone()), "healthz", config.bind_address_hard_fail).await?;
        }
        if let Some(addr) = config.metrics_bind_address {
            listen(addr, metrics_router(admin.clone()), "metrics", config.bind_address_hard_fail).await?;
        }
    }

    let counters = SourceCounters {
        invalid_documents: metrics.manifest_invalid_documents.clone(),
        reads: metrics.manifest_reads.clone(),
    };
    let source = ManifestSource::new(folder, WatchOptions::default(), counters);
    let (events_tx, events) = mpsc::channel(1024);
    let source = tokio::spawn(source.run(events_tx));

    let health_checks = Arc::new(HealthChecks::default());
    // A dry run programs nothing, and answers no load balancer either.
    if !once && dataplane.mode() != "dry-run" {
        let state = state_tx.subscribe();
        tokio::spawn(serve_health_checks(health_checks.clone(), health.clone(), Arc::new(SystemClock), state));
    }
    let runner_config = RunnerConfig::new(config.min_sync_period, config.sync_period);
    let handles = RunnerHandles { health, metrics, state: state_tx, clock: Arc::new(SystemClock), health_checks };
    let runner = Runner::new(runner_config, StateBuilder::new(state_config), dataplane, handles);
    if once {
        let result = runner.run_once(events).await;
        source.abort();
        return match result {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e) => {
                error!(error = %e, "sync failed");
                Ok(ExitCode::FAILURE)
            }
        };
    }
    let source_failed = async {
        match source.await {
            Ok(Err(e)) => error!(error = %e, "manifest source failed"),
            Ok(Ok(())) => {}
            Err(e) => error!(error = %e, "manifest source stopped"),
        }
    };
    tokio::select! {
        () = runner.run(events, shutdown_signal()) => {}
        () = source_failed => return Ok(ExitCode::FAILURE),
    }
    Ok(ExitCode::SUCCESS)
}

/// The configuration's idea of the running mode, for its defaults.
fn dataplane_mode(dataplane: &dyn Dataplane) -> Option<kproxy_config::ProxyMode> {
    match dataplane.mode() {
        "nftables" => Some(kproxy_config::ProxyMode::Nftables),
        _ => None,
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
