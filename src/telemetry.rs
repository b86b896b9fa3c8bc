//! Logs and traces: `tracing` with text or JSON output, and OpenTelemetry traces exported over
//! OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (one span per admission request and per
//! reconcile).
//!
//! The span of an admission request is left out of the log output. The log layer formats the
//! fields of every span it keeps when the span opens; no line logged at `info` used this one's,
//! and leaving it out made the webhook benchmark 7–20% faster at `info` (EvictionRequest creates
//! most). Without an OTLP endpoint the span is disabled at its call site, so it is never built;
//! with one, it is exported as before and still left out of the logs. Log lines about an
//! admission request carry its uid themselves.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The name of the span of one admission request (traced, not logged).
pub const ADMISSION_SPAN: &str = "admission";

/// What the log output keeps: every event and span the filter lets through but the span of an
/// admission request.
fn logged(meta: &Metadata<'_>) -> bool {
    !(meta.is_span() && meta.name() == ADMISSION_SPAN)
}

/// The global filter that disables the span of an admission request where nothing exports
/// traces (per-layer filters alone cannot: a span one layer filters out is still built for the
/// others).
fn admission_spans(traced: bool) -> FilterFn<impl Fn(&Metadata<'_>) -> bool> {
    filter_fn(move |meta| traced || logged(meta))
}

/// The log layer: `format` lines into `writer`, without admission spans.
fn log_layer<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let ansi = format == LogFormat::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => base.with_filter(filter_fn(logged)).boxed(),
        LogFormat::Json => base.json().with_filter(filter_fn(logged)).boxed(),
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Keeps the trace exporter alive; flushes it when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

/// Installs the global subscriber. Log level from `RUST_LOG` (default `info`).
///
/// # Errors
/// When the OTLP exporter cannot be built from the environment.
pub fn init(format: LogFormat) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = log_layer(format, std::io::stderr);
    let provider = match std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
                .build()?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name("evictord")
                .build();
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource)
                    .build(),
            )
        }
        _ => None,
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("evictord")));
    tracing_subscriber::registry()
        .with(filter)
        .with(admission_spans(otel.is_some()))
        .with(fmt)
        .with(otel)
        .try_init()?;
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing::{info, info_span, warn};
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Collects what the log layer writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Names of the spans a layer saw open (an exporter of traces, as the OTLP layer is).
    #[derive(Clone, Default)]
    struct Opened(Arc<Mutex<Vec<&'static str>>>);

    impl<S: Subscriber> Layer<S> for Opened {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _id: &tracing::span::Id,
            _ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.lock().unwrap().push(attrs.metadata().name());
        }
    }

    /// Without an exporter the admission span is not built at all; with one it is exported.
    /// Either way the logs keep other spans' fields and never the admission span's.
    #[test]
    fn admission_spans_are_traced_never_logged() {
        for (format, traced) in [
            (LogFormat::Text, false),
            (LogFormat::Json, false),
            (LogFormat::Text, true),
            (LogFormat::Json, true),
        ] {
            let case = format!("{format:?}, traced: {traced}");
            let lines = Lines::default();
            let writer = lines.clone();
            let opened = Opened::default();
            let subscriber = tracing_subscriber::registry()
                .with(EnvFilter::new("info"))
                .with(admission_spans(traced))
                .with(log_layer(format, move || writer.clone()))
                .with(traced.then(|| opened.clone()));
            tracing::subscriber::with_default(subscriber, || {
                let admission = info_span!(ADMISSION_SPAN, uid = "u-admission");
                assert_eq!(admission.is_disabled(), !traced, "{case}");
                admission.in_scope(|| warn!("inside an admission"));
                let reconcile = info_span!("reconcile", request = "ns/r-reconcile");
                assert!(!reconcile.is_disabled(), "{case}");
                reconcile.in_scope(|| info!("inside a reconcile"));
            });
            let out = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
            assert!(out.contains("inside an admission"), "{case}: {out}");
            assert!(!out.contains("u-admission"), "{case}: {out}");
            assert!(out.contains("ns/r-reconcile"), "{case}: {out}");
            let expected: &[&str] = if traced {
                &[ADMISSION_SPAN, "reconcile"]
            } else {
                &[]
            };
            assert_eq!(*opened.0.lock().unwrap(), expected, "{case}");
        }
    }
}
