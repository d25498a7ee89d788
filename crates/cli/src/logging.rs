//! kproxy's log on stderr: tracing's text lines, or JSON in the shape of
//! Kubernetes' structured logging (component-base's `--logging-format
//! json`), so pipelines that parse kube-proxy's logs parse kproxy's.
//!
//! One JSON object per line: `ts` (milliseconds since the epoch, a float,
//! as component-base writes it), `caller`, `msg`, `err` (an event's
//! `error` field, klog's key for errors), `v` (klog's verbosity: 0 for
//! errors, warnings and info, 2 for debug, 4 for trace), then the event's
//! and its spans' fields as top-level keys.
//!
//! Every crate logs at kproxy's level (`-v`), except the events that only
//! repeat what kproxy reports itself: kube-client's warnings and errors
//! about failed requests and broken watch streams, and kube-runtime's
//! watcher errors (kproxy logs each list or watch failure once, with its
//! cause, and exports it in `/healthz`).

use std::fmt::Write as _;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The filter for verbosity `v`: 0-1 info, 2-3 debug, 4+ trace, for every
/// crate; `RUST_LOG` replaces it.
pub fn filter(verbosity: u32) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directive(verbosity)))
}

fn directive(verbosity: u32) -> &'static str {
    match verbosity {
        0..=1 => "info",
        2..=3 => "debug",
        _ => "trace",
    }
}

/// Whether an event only repeats an outage kproxy reports itself: each
/// failed request and broken watch stream (kube-client warns or errs,
/// kube-runtime's watcher logs it), which kproxy's watch loop logs once
/// per attempt with the cause. kube-client's other warnings (its TLS
/// ones, say) stay.
fn repeats_kproxy(meta: &Metadata<'_>) -> bool {
    match meta.target() {
        "kube_runtime::watcher" => true,
        "kube_client::client" | "kube_client::client::builder" => *meta.level() <= Level::WARN,
        _ => false,
    }
}

/// The global filter dropping [`repeats_kproxy`]'s events.
fn not_repeated() -> FilterFn<impl Fn(&Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|meta| !repeats_kproxy(meta))
}

/// Installs the subscriber for `logging` (a second call keeps the first).
pub fn init(logging: &kproxy_config::Logging) {
    let registry = tracing_subscriber::registry().with(filter(logging.verbosity)).with(not_repeated());
    let _ = match logging.format {
        kproxy_config::LogFormat::Json => registry.with(KlogJson::new(std::io::stderr)).try_init(),
        kproxy_config::LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .try_init(),
    };
}

/// The JSON layer; `make` opens the output for each line.
pub struct KlogJson<F> {
    make: F,
}

impl<F, W> KlogJson<F>
where
    F: Fn() -> W + Send + Sync + 'static,
    W: std::io::Write,
{
    pub fn new(make: F) -> Self {
        Self { make }
    }
}

/// A span's fields, kept in its extensions.
struct SpanFields(Vec<(String, Value)>);

/// Collects fields as JSON values, `message` apart.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    error: Option<String>,
    pairs: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => self.message = Some(value.as_str().map_or_else(|| value.to_string(), str::to_owned)),
            "error" => self.error = Some(value.as_str().map_or_else(|| value.to_string(), str::to_owned)),
            name => {
                // `log` records arrive with their metadata as fields.
                if !name.starts_with("log.") {
                    self.pairs.retain(|(k, _)| k != name);
                    self.pairs.push((name.to_owned(), value));
                }
            }
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut next = value.source();
        while let Some(e) = next {
            let _ = write!(text, ": {e}");
            next = e.source();
        }
        self.put(field, text.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// klog's verbosity of a tracing level.
fn verbosity(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 4,
        Level::DEBUG => 2,
        _ => 0,
    }
}

/// `dir/file.rs:line`, as zap's short caller encoder writes it.
fn caller(file: Option<&str>, line: Option<u32>) -> Option<String> {
    let file = file?;
    let mut parts = file.rsplit('/');
    let name = parts.next()?;
    let short = parts.next().map_or_else(|| name.to_owned(), |dir| format!("{dir}/{name}"));
    Some(match line {
        Some(line) => format!("{short}:{line}"),
        None => short,
    })
}

/// One line: the keys in component-base's order, then the fields.
fn line(ts_ms: f64, caller: Option<String>, level: &Level, event: Fields, spans: Vec<(String, Value)>) -> String {
    let mut keys: Vec<(String, Value)> = Vec::new();
    keys.push(("ts".into(), serde_json::Number::from_f64(ts_ms).map_or(Value::Null, Value::Number)));
    if let Some(caller) = caller {
        keys.push(("caller".into(), caller.into()));
    }
    keys.push(("msg".into(), event.message.unwrap_or_default().into()));
    if let Some(error) = event.error {
        keys.push(("err".into(), error.into()));
    }
    keys.push(("v".into(), verbosity(level).into()));
    let reserved = ["ts", "caller", "msg", "err", "v"];
    // An event's own field wins over its span's of the same name.
    let mut rest: Vec<(String, Value)> = Vec::new();
    for (key, value) in spans.into_iter().chain(event.pairs) {
        if reserved.contains(&key.as_str()) {
            continue;
        }
        rest.retain(|(k, _)| *k != key);
        rest.push((key, value));
    }
    keys.extend(rest);
    let mut out = String::from("{");
    for (i, (key, value)) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push_str("}\n");
    out
}

impl<S, F, W> Layer<S> for KlogJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    F: Fn() -> W + Send + Sync + 'static,
    W: std::io::Write,
{
    fn on_new_span(&self, attrs: &tracing::span::Attributes<'_>, id: &tracing::span::Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.pairs));
        }
    }

    fn on_record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<SpanFields>() {
            Some(existing) => {
                for (key, value) in fields.pairs {
                    existing.0.retain(|(k, _)| *k != key);
                    existing.0.push((key, value));
                }
            }
            None => extensions.insert(SpanFields(fields.pairs)),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(own) = span.extensions().get::<SpanFields>() {
                    spans.extend(own.0.iter().cloned());
                }
            }
        }
        let meta = event.metadata();
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or_default();
        let text = line(ts_ms, caller(meta.file(), meta.line()), meta.level(), fields, spans);
        // Like tracing's own writers: a log that cannot be written is lost.
        let _ = (self.make)().write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Runs `f` with the JSON layer writing into a buffer; the lines.
    fn logged(f: impl FnOnce()) -> Vec<serde_json::Map<String, Value>> {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let layer = KlogJson::new(move || Sink(sink.clone()));
        let subscriber =
            tracing_subscriber::registry().with(EnvFilter::new(directive(4))).with(not_repeated()).with(layer);
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| match serde_json::from_str(l) {
                Ok(Value::Object(map)) => map,
                other => panic!("not a JSON object: {l} ({other:?})"),
            })
            .collect()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_info_event_is_one_object_with_ts_msg_v_and_its_fields_at_the_top() {
        let lines = logged(|| tracing::info!(node = "node-a", services = 3u64, "starting"));
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        let keys: Vec<&str> = l.keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 6, "{l:?}");
        assert_eq!(l["msg"], "starting");
        assert_eq!(l["v"], 0);
        assert_eq!(l["node"], "node-a");
        assert_eq!(l["services"], 3);
        let ts = l["ts"].as_f64().unwrap();
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
        assert!((now_ms - ts).abs() < 60_000.0, "milliseconds since the epoch: {ts}");
        assert!(l["caller"].as_str().unwrap().starts_with("src/logging.rs:"), "{l:?}");
    }

    #[test]
    fn an_error_carries_err_and_the_span_fields_and_debug_is_v2() {
        let lines = logged(|| {
            let span = tracing::info_span!("sync", mode = "nftables", full = true);
            let _entered = span.enter();
            tracing::error!(error = "the kernel refused the transaction", reason = "EPERM", "sync failed");
            tracing::debug!(took_ms = 3u64, "sync applied");
        });
        let (error, debug) = (&lines[0], &lines[1]);
        assert_eq!(error["msg"], "sync failed");
        assert_eq!(error["err"], "the kernel refused the transaction");
        assert_eq!(error["v"], 0);
        assert_eq!(
            (&error["mode"], &error["full"], &error["reason"]),
            (&"nftables".into(), &true.into(), &"EPERM".into())
        );
        assert!(!error.contains_key("error"), "{error:?}");
        assert_eq!(debug["v"], 2);
        assert_eq!(debug["mode"], "nftables");
    }

    #[test]
    fn every_crate_follows_the_verbosity_except_the_repeated_outage_messages() {
        assert_eq!([directive(0), directive(1), directive(2), directive(7)], ["info", "info", "debug", "trace"]);
        let lines = logged(|| {
            tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
            tracing::warn!(target: "kube_client::client", "eof in poll: UnexpectedEof");
            tracing::debug!(target: "kube_runtime::watcher", "watcher error: connection refused");
            tracing::debug!(target: "kube_client::client::builder", "requesting");
            tracing::warn!(target: "kube_client::client::tls", "failed to reload CA bundle; keeping stale roots");
            tracing::debug!(target: "hyper_util::client::legacy::pool", "pooling idle connection");
        });
        let messages: Vec<&str> = lines.iter().filter_map(|l| l["msg"].as_str()).collect();
        assert_eq!(
            messages,
            ["requesting", "failed to reload CA bundle; keeping stale roots", "pooling idle connection"]
        );
    }
}
