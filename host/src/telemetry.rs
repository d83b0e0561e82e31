//! OpenTelemetry traces, exported over OTLP/HTTP (JSON bodies).
//!
//! Off unless `[telemetry] otlp_endpoint` or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector ([`Telemetry::start`]);
//! while off, none of the spans below beyond the reconcile span (which the
//! logs use) is even created ([`active`]).
//!
//! Spans (attributes in parentheses):
//!
//! - `reconcile`: the worker's span (`controller`, `epoch`, `object`,
//!   `reason`, plus `lease`, `kind`, `name` and `outcome` as trace
//!   attributes only, so log lines keep their fields). When the change that
//!   woke it carried a W3C `traceparent`, it is that context's child.
//! - `store.get`, `store.list`, `store.commit`: the guest's store host
//!   calls, children of the reconcile that made them (`kind`, `name`,
//!   `objects`, `ops`, `events`, `outcome`).
//! - `http.request`: a guest's outbound request (`method`, `host`,
//!   `status` or `outcome`); its context goes out in the request's
//!   `traceparent` header.
//! - `lease.acquire` (from the acquire sent to the grant; `controller`,
//!   `lease`, `epoch`, `holder`), `lease.lost` (from the loss decided to
//!   the tenure's end recorded) and its child `lease.abort` (from the
//!   guest's revocation to its Store dropped; also a root span of its own
//!   at shutdown), with the `reason`.
//! - `api.write`: a `PUT` or `DELETE` of an object through the HTTP API
//!   (`kind`, `name`, `method`), the child of the request's `traceparent`
//!   when it has one. Its context is stored with the changes the write
//!   makes ([`with_write_context`]) and handed back on the change feed, so
//!   the reconciles those changes trigger join the caller's trace.
//!
//! Spans of this module's own making use the target [`SPAN_TARGET`], which
//! the log output never shows; log lines (events) are never exported. Export runs on its own thread and a small
//! runtime of its own: a slow or absent collector never holds up a
//! reconcile (the batch queue drops spans when full), and shutdown flushes
//! what is queued ([`Telemetry::shutdown`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider};
use serde::Serialize;
use tracing::Metadata;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::{Layer, Registry};

/// The standard environment variable naming the collector, used when the
/// config has no `[telemetry] otlp_endpoint`.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The W3C trace context header (and the change feed's column).
pub const TRACEPARENT: &str = "traceparent";

/// The target of the spans only traces carry; never shown in the logs.
pub const SPAN_TARGET: &str = "leasehold_trace";

/// The path OTLP/HTTP receivers take spans at, after the endpoint.
pub const TRACES_PATH: &str = "/v1/traces";

/// How long one export may take, and how long shutdown waits for the last.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: the extra spans are made only then.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// A valid W3C `traceparent` (version 00, trace and parent ids not zero),
/// in its canonical lowercase form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceParent(String);

impl TraceParent {
    /// `text` as a trace context, if it is a valid `traceparent` header
    /// value; anything else is `None` (a bad header is ignored, as the W3C
    /// recommendation says, never refused).
    pub fn parse(text: &str) -> Option<Self> {
        fn hex(part: &str, len: usize) -> bool {
            part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        if text.len() > 512 {
            return None;
        }
        let mut parts = text.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let valid = hex(version, 2)
            && version != "ff"
            // Version 00 has exactly four parts; a later version may add
            // more, which a 00 reader ignores.
            && (version != "00" || parts.next().is_none())
            && hex(trace, 32)
            && trace.bytes().any(|b| b != b'0')
            && hex(span, 16)
            && span.bytes().any(|b| b != b'0')
            && hex(flags, 2);
        valid.then(|| TraceParent(format!("00-{trace}-{span}-{flags}")))
    }

    /// The header value, e.g. `00-<trace id>-<span id>-01`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id part (32 lowercase hex digits).
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The context of `span` (its trace, it as the parent), when it is
    /// recorded by an exporting telemetry layer.
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        if !active() || span.is_none() {
            return None;
        }
        Self::of_context(&span.context())
    }

    /// [`TraceParent::of_span`], or, for a span not made because its
    /// trace is not sampled ([`store_span`], [`http_span`]), the context of
    /// the current span: an unsampled trace is passed on as such (flags
    /// `00`), so what it causes stays unsampled too, as the parent-based
    /// sampler decides.
    pub fn of_span_or_current(span: &tracing::Span) -> Option<Self> {
        if !active() {
            return None;
        }
        if span.is_none() {
            return Self::of_span(&tracing::Span::current());
        }
        Self::of_span(span)
    }

    fn of_context(context: &opentelemetry::Context) -> Option<Self> {
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        // The version-00 form the propagator writes, without its map.
        Some(TraceParent(format!(
            "00-{:032x}-{:016x}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        )))
    }

    /// This trace context as a remote parent.
    pub fn context(&self) -> opentelemetry::Context {
        let carrier = HashMap::from([(TRACEPARENT.to_string(), self.0.clone())]);
        TraceContextPropagator::new().extract(&carrier)
    }

    /// Make `span` a child of this context (no effect while off).
    pub fn adopt(&self, span: &tracing::Span) {
        if active() {
            // Fails only when the span was already started, which a
            // freshly made span never is.
            let _ = span.set_parent(self.context());
        }
    }
}

impl TraceParent {
    /// Link `span` to this context (no effect while off): the span was
    /// caused by it too, though it is not its parent.
    pub fn link(&self, span: &tracing::Span) {
        if active() {
            span.add_link(self.context().span().span_context().clone());
        }
    }
}

impl Serialize for TraceParent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

tokio::task_local! {
    static WRITE_CONTEXT: Option<TraceParent>;
}

/// Run `future` (a store write) with `context` as the trace context the
/// store records with every change it commits. Both backends read it
/// ([`write_context`]), so an API write and a guest commit pass their
/// trace on to the reconciles their changes trigger.
pub async fn with_write_context<F: Future>(context: Option<TraceParent>, future: F) -> F::Output {
    WRITE_CONTEXT.scope(context, future).await
}

/// The trace context of the write being made on this task, if any.
pub fn write_context() -> Option<TraceParent> {
    WRITE_CONTEXT.try_with(Clone::clone).ok().flatten()
}

/// Record `value` as the trace attribute `key` of `span` (no effect while
/// off, or on a span no exporting layer records, or whose trace is not
/// sampled: nothing of it is exported).
pub fn attribute(span: &tracing::Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if active() && sampled(span) {
        span.set_attribute(key, value);
    }
}

/// Whether `span` is recorded for export: its trace was sampled. Asking
/// makes the sampling decision (the span's parent must be set before);
/// the sampler decides at the root, and every span of an unsampled trace
/// is unsampled too (parent-based sampling).
fn sampled(span: &tracing::Span) -> bool {
    !span.is_none() && span.context().span().span_context().is_sampled()
}

/// Whether a span made now, as a child of the current span, would be
/// exported: not when the current span belongs to an unsampled trace (a
/// reconcile the sampler left out). Such a child would be created, given
/// its fields, started, judged unsampled and dropped, for nothing; the
/// hot paths (a guest's store calls and requests) skip it. With no current
/// span the child would be a root, which the sampler decides for itself.
fn children_recorded() -> bool {
    let current = tracing::Span::current();
    if current.is_none() {
        return true;
    }
    let context = current.context();
    let span = context.span();
    let span = span.span_context();
    // A current span the exporting layer does not see has no context: the
    // child would be a root.
    !span.is_valid() || span.is_sampled()
}

/// A guest store call that has a span of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall<'a> {
    /// `store.get` of one object.
    Get {
        /// Its kind.
        kind: &'a str,
        /// Its name.
        name: &'a str,
    },
    /// `store.list` of a kind.
    List {
        /// The kind.
        kind: &'a str,
    },
    /// `store.commit` of `ops` operations and `events` events.
    Commit {
        /// Operations.
        ops: usize,
        /// Events.
        events: usize,
    },
}

/// The span of one guest store call, a child of the current (reconcile)
/// span, with an empty `outcome` field to [`outcome`]; disabled while off,
/// and not made in a trace the sampler left out ([`children_recorded`]).
pub fn store_span(call: StoreCall<'_>) -> tracing::Span {
    use tracing::field::Empty;
    if !active() || !children_recorded() {
        return tracing::Span::none();
    }
    match call {
        StoreCall::Get { kind, name } => {
            tracing::info_span!(target: SPAN_TARGET, "store.get", kind, name, outcome = Empty)
        }
        StoreCall::List { kind } => {
            tracing::info_span!(target: SPAN_TARGET, "store.list", kind, objects = Empty, outcome = Empty)
        }
        StoreCall::Commit { ops, events } => {
            tracing::info_span!(target: SPAN_TARGET, "store.commit", ops, events, outcome = Empty)
        }
    }
}

/// Record `value` in the `outcome` field of a span made here (no effect on
/// a disabled span).
pub fn outcome(span: &tracing::Span, value: &'static str) {
    span.record("outcome", value);
}

/// The span of a guest's outbound HTTP request (`method`, `host`; never
/// the path or query), a child of the current (reconcile) span; disabled
/// while off, and not made in a trace the sampler left out.
pub fn http_span(method: &str, host: &str) -> tracing::Span {
    if !active() || !children_recorded() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        "http.request",
        method,
        host,
        http.status = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// Put `span`'s context in `headers` as `traceparent` (no effect while
/// off): of the current span when `span` was not made because its trace
/// is not sampled, so the receiver sees the trace, unsampled.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if let Some(context) = TraceParent::of_span_or_current(span)
        && let Ok(value) = http::HeaderValue::from_str(context.as_str())
    {
        headers.insert(TRACEPARENT, value);
    }
}

/// The span of a supervisor's tenure step that is still to happen
/// (`lease.lost`: from the loss decided to its end recorded; `lease.abort`:
/// from the guest's revocation to its Store dropped), with `reason`;
/// disabled while off.
pub fn lease_span(step: LeaseStep, controller: &str, epoch: u64, reason: &str) -> tracing::Span {
    if !active() {
        return tracing::Span::none();
    }
    let span = match step {
        LeaseStep::Lost => {
            tracing::info_span!(target: SPAN_TARGET, "lease.lost", controller, epoch, reason)
        }
        LeaseStep::Abort => {
            tracing::info_span!(target: SPAN_TARGET, "lease.abort", controller, epoch, reason)
        }
    };
    // The lease is named after its controller.
    attribute(&span, "lease", controller.to_string());
    span
}

/// A step of a tenure that has a span of its own, made while it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStep {
    /// The lease was lost (renewal refused or late, fenced, identity).
    Lost,
    /// The guest was aborted and its Store dropped.
    Abort,
}

static TRACER: std::sync::Mutex<Option<SdkTracer>> = std::sync::Mutex::new(None);

/// Record the span `lease.acquire` of a grant: from the acquire that won it
/// (sent `elapsed` ago) to now. Made only once granted, so a standby's
/// attempts while another replica leads make no spans.
pub fn acquired(controller: &str, epoch: u64, holder: &str, elapsed: Duration) {
    use opentelemetry::trace::{Span as _, Tracer as _};
    if !active() {
        return;
    }
    let Some(tracer) = TRACER.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
        return;
    };
    let end = std::time::SystemTime::now();
    let mut span = tracer
        .span_builder("lease.acquire")
        .with_start_time(end - elapsed)
        .with_attributes([
            opentelemetry::KeyValue::new("controller", controller.to_string()),
            opentelemetry::KeyValue::new("lease", controller.to_string()),
            opentelemetry::KeyValue::new("epoch", i64::try_from(epoch).unwrap_or(i64::MAX)),
            opentelemetry::KeyValue::new("holder", holder.to_string()),
        ])
        .start_with_context(&tracer, &opentelemetry::Context::new());
    span.end_with_timestamp(end);
}

/// The span of an API write (`PUT`/`DELETE` of an object), a child of the
/// request's trace context when it carries one; disabled while off.
pub fn api_write_span(
    method: &str,
    kind: &str,
    name: &str,
    parent: Option<&TraceParent>,
) -> tracing::Span {
    if !active() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "api.write",
        method,
        kind,
        name,
        http.status = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        parent.adopt(&span);
    }
    span
}

/// The exporting layer, as the subscriber holds it: put it first, directly
/// on the registry. Only the host's own spans are exported (the reconcile
/// span and this module's); other crates' spans never are.
pub type ExportLayer = Filtered<
    OpenTelemetryLayer<Registry, SdkTracer>,
    FilterFn<fn(&Metadata<'_>) -> bool>,
    Registry,
>;

/// What the exporting layer sees: spans of the host (never events: log
/// lines, a guest's own among them, stay out of the traces, and cost
/// nothing there).
fn exported(metadata: &Metadata<'_>) -> bool {
    metadata.is_span()
        && (metadata.target() == SPAN_TARGET || metadata.target().starts_with("leasehold_host"))
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter could not be built.
    #[error("cannot export traces to {endpoint}: {reason}")]
    Exporter {
        /// The collector (redacted).
        endpoint: String,
        /// What failed.
        reason: String,
    },
}

/// The running exporter; [`Telemetry::shutdown`] flushes it.
pub struct Telemetry {
    provider: SdkTracerProvider,
    endpoint: String,
    runtime: Option<(
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    )>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// `[telemetry]`: OpenTelemetry traces (see [`crate::telemetry`]).
#[derive(Clone, Debug)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector's base URL (`http://host:port[/path]`;
    /// spans go to `<it>/v1/traces`), from `otlp_endpoint` or else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. `None`: no traces are exported.
    pub otlp_endpoint: Option<String>,
    /// The share of traces recorded, 0 to 1, for traces that start here
    /// (a reconcile without a caller's context, a lease step, an API write
    /// without `traceparent`); a trace a caller's `traceparent` marked
    /// sampled is always recorded, one marked unsampled never.
    pub sample_ratio: f64,
}

/// Default `[telemetry] sample_ratio`: every trace. Lower it on a busy
/// host (0.1 costs under a tenth of reconcile throughput; see
/// BENCHMARKS.md).
pub const DEFAULT_SAMPLE_RATIO: f64 = 1.0;

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: DEFAULT_SAMPLE_RATIO,
        }
    }
}

// By hand: the ratio is a float, compared by its bits (the config never
// holds a NaN: `resolve` refuses it).
impl PartialEq for TelemetryConfig {
    fn eq(&self, other: &Self) -> bool {
        self.otlp_endpoint == other.otlp_endpoint
            && self.sample_ratio.to_bits() == other.sample_ratio.to_bits()
    }
}

impl Eq for TelemetryConfig {}

impl Telemetry {
    /// Start exporting to `config.otlp_endpoint` (nothing when it is
    /// `None`: telemetry stays off), with the layer to install in the
    /// subscriber. `holder` and `cluster` name this host in the traces'
    /// resource.
    pub fn start(
        config: &TelemetryConfig,
        holder: &str,
        cluster: &str,
    ) -> Result<Option<(Self, ExportLayer)>, TelemetryError> {
        let Some(base) = config.otlp_endpoint.as_deref() else {
            return Ok(None);
        };
        let endpoint = format!("{}{TRACES_PATH}", base.trim_end_matches('/'));
        let shown = crate::db::scrub(&endpoint);
        let failed = |reason: String| TelemetryError::Exporter {
            endpoint: shown.clone(),
            reason,
        };
        // The exporter's requests run on a runtime of their own, so
        // neither a flush at shutdown nor a stuck collector depends on the
        // host's runtimes.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(format!("cannot start the export runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| failed(format!("cannot start the export thread: {e}")))?;
        let client = ExportClient {
            inner: opentelemetry_http::hyper::HyperClient::with_default_connector(
                EXPORT_TIMEOUT,
                None,
            ),
            runtime: handle,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("leasehold")
            .with_attributes([
                opentelemetry::KeyValue::new("service.instance.id", holder.to_string()),
                opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                opentelemetry::KeyValue::new("leasehold.cluster", cluster.to_string()),
            ])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(Logged {
                    inner: exporter,
                    endpoint: shown.clone(),
                })
                .build(),
            )
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("leasehold");
        *TRACER.lock().unwrap_or_else(|p| p.into_inner()) = Some(tracer.clone());
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            // Parents come from the tracing span tree; no OpenTelemetry
            // context is attached on every poll of a traced future.
            .with_context_activation(false)
            .with_target(false)
            .with_level(false);
        let filter = FilterFn::new(exported as fn(&Metadata<'_>) -> bool);
        ACTIVE.store(true, Ordering::Relaxed);
        Ok(Some((
            Self {
                provider,
                endpoint: shown,
                runtime: Some((stop, thread)),
            },
            layer.with_filter(filter),
        )))
    }

    /// Stop (`false`) or start again (`true`) making the spans this module
    /// adds, without stopping the exporter: a host never does, the
    /// tracing-cost benchmark does to compare both in one run.
    pub fn set_making_spans(&self, on: bool) {
        ACTIVE.store(on, Ordering::Relaxed);
    }

    /// Where spans go (the collector's URL, credentials scrubbed).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stop making spans, export what is queued (bounded by
    /// [`EXPORT_TIMEOUT`]) and stop the export thread. Blocks: call it
    /// outside async code, or through `spawn_blocking`.
    pub fn shutdown(mut self) {
        ACTIVE.store(false, Ordering::Relaxed);
        TRACER.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Err(e) = self.provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            tracing::warn!(endpoint = %self.endpoint, error = %e, "traces not all exported at shutdown");
        }
        if let Some((stop, thread)) = self.runtime.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

/// The exporter's HTTP client: hyper, on the export runtime, whichever
/// thread the batch processor calls it from.
#[derive(Debug, Clone)]
struct ExportClient {
    inner: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let inner = self.inner.clone();
        self.runtime
            .spawn(async move { inner.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as opentelemetry_http::HttpError)?
    }
}

/// The OTLP exporter, with a warning in the log when an export fails (at
/// most one a minute, so an absent collector does not flood the log).
#[derive(Debug)]
struct Logged<E> {
    inner: E,
    endpoint: String,
}

static LAST_WARNING: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Logged<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            let mut last = LAST_WARNING.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                *last = Some(std::time::Instant::now());
                tracing::warn!(
                    endpoint = %self.endpoint,
                    spans,
                    error = %crate::db::scrub(&e.to_string()),
                    "cannot export spans; dropping them (repeats are not logged for a minute)"
                );
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_parsed_in_canonical_form_or_ignored() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(good).expect("valid");
        assert_eq!(parsed.as_str(), good);
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            TraceParent::parse(&good.to_uppercase()),
            None,
            "uppercase hex is invalid"
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // Unsampled contexts are kept, flags and all.
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(TraceParent::parse(unsampled).unwrap().as_str(), unsampled);
        // A later version is read as 00, its extra parts ignored.
        assert_eq!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .unwrap()
                .as_str(),
            good
        );
        assert_eq!(TraceParent::parse(&format!("{good}-extra")), None);
    }

    #[tokio::test]
    async fn the_write_context_is_seen_only_inside_its_scope() {
        let context = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(write_context(), None);
        let seen = with_write_context(context.clone(), async { write_context() }).await;
        assert_eq!(seen, context);
        assert_eq!(write_context(), None);
    }
}
