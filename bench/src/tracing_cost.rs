//! Tracing cost: reconcile throughput with OpenTelemetry traces exported
//! (sampling 10 %) against traces off, side by side in one run. Goal:
//! traced / off >= 0.95, judged only when the A/A control's median lies
//! within 0.03 of 1.00.
//!
//! The workload is wasm-cost's, on the memory store: the example scheduler
//! as a component, 4 nodes with room to spare and 32 pending tasks; a
//! round reconciles every task once by name (one `get`, two listings, one
//! commit of the task and its node plus an event, a few log lines), each
//! inside the worker's own reconcile span (`supervisor::reconcile_span`,
//! with its trace attributes and `outcome`), as the worker runs it. Between
//! rounds the objects are put back (untimed).
//!
//! Sides: *off* (a subscriber without the exporting layer, and the
//! telemetry module's spans not made: what a host without
//! `otlp_endpoint` runs), *traced* (the exporting layer of
//! `telemetry::Telemetry::start` at `sample_ratio = 0.1`, exporting over
//! OTLP/HTTP to a receiver on a loopback port that answers 200 to every
//! request) and *off again*, the A/A control. The sides take turns round by
//! round, rotating which goes first; rounds are grouped into repeats, each
//! giving the ratio of the sides' throughputs (reconciles per second over
//! the repeat), and the report prints min / median / max of the
//! traced / off and control / off ratios. The goal is judged on the median.
//! Export itself runs on the exporter's own thread, so on two cores it
//! competes with the measured thread only for the CPU it takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use leasehold_host::config::TelemetryConfig;
use leasehold_host::fence::Fence;
use leasehold_host::runtime::{CommitCounters, GuestInstance, ReconcileReason, Reconciled};
use leasehold_host::store::Store;
use leasehold_host::supervisor::{reconcile_outcome, reconcile_span};
use leasehold_host::telemetry::{self, Telemetry};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

use crate::Scale;
use crate::report::{Comparison, Report, median, rate, ratios};
use crate::support::{self, MemoryBackends, key};

const PART: &str = "tracing-cost";
const CLUSTER: &str = "traced";
const NODES: usize = 4;
const TASKS: usize = 32;
const NODE_CAPACITY: usize = 1000;
/// Repeats (each one ratio) and rounds of every side per repeat.
const REPEATS: usize = 9;
/// A repeat of a few hundred milliseconds: shorter ones left the ratio to
/// the scheduling noise of a shared machine (the A/A control showed it).
const ROUNDS: usize = 100;
/// A quick run still takes a few seconds: fewer rounds leave the ratio to
/// the noise of a busy machine (the A/A control shows it).
const QUICK_REPEATS: usize = 5;
const QUICK_ROUNDS: usize = 10;
const SAMPLE_RATIO: f64 = 0.1;
const GOAL: f64 = 0.95;
/// The goal is judged only when the A/A control's median lies this close
/// to 1.00: noise of the goal's own margin could hide a miss.
const NOISE: f64 = 0.03;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Off,
    Traced,
    /// Off again: the A/A control.
    Control,
}

const SIDES: [Side; 3] = [Side::Off, Side::Traced, Side::Control];

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let receiver = Receiver::start()?;
    let config = TelemetryConfig {
        otlp_endpoint: Some(format!("http://{}", receiver.addr)),
        sample_ratio: SAMPLE_RATIO,
    };
    let (exporter, layer) = Telemetry::start(&config, "bench", CLUSTER)
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| anyhow!("telemetry did not start"))?;
    let traced = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let off = tracing::Dispatch::new(tracing_subscriber::registry());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let measured = rt.block_on(measure(scale, &exporter, &traced, &off));
    // Flushes the last spans, so the receiver's count is whole.
    exporter.shutdown();
    let (ratios, control, off_rates) = measured?;
    let compared = Comparison::new(&ratios, &control).ok_or_else(|| anyhow!("no repeat"))?;
    report.compared_goal(
        PART,
        format!(
            "reconcile throughput, traces exported (sampling {} %) / off, ratio per repeat ({} interleaved repeats)",
            SAMPLE_RATIO * 100.0,
            ratios.len()
        ),
        compared.ab.ratios(),
        &format!(">= {GOAL} (median)"),
        compared.ab.median >= GOAL,
        (&compared, NOISE),
    );
    report.info(PART, "A/A control, off again / off", compared.control());
    report.info(
        PART,
        "scheduler reconciles per second, traces off (median of repeats)",
        rate(median(&off_rates)),
    );
    report.info(
        PART,
        "what the receiver took",
        format!(
            "{} export requests, {} KiB of OTLP JSON",
            receiver.requests.load(Ordering::Relaxed),
            receiver.bytes.load(Ordering::Relaxed) / 1024
        ),
    );
    ensure!(
        receiver.requests.load(Ordering::Relaxed) > 0,
        "no span reached the receiver: the traced side exported nothing"
    );
    Ok(())
}

/// Per repeat: traced/off and control/off throughput ratios, and the off
/// side's throughput.
async fn measure(
    scale: Scale,
    exporter: &Telemetry,
    traced: &tracing::Dispatch,
    off: &tracing::Dispatch,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let backends = MemoryBackends::new();
    let store: Arc<dyn Store> = backends.store.clone();
    let fence = support::grant(backends.authority.as_ref(), CLUSTER, "scheduler").await?;
    let runtime = support::runtime(true)?;
    let compiled = support::compile(&runtime, "scheduler", "scheduler")?;
    let mut guest = compiled
        .instantiate(
            fence.clone(),
            store.clone(),
            Arc::new(CommitCounters::default()),
            compiled.revocation(),
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let repeats = scale.pick(REPEATS, QUICK_REPEATS);
    let rounds = scale.pick(ROUNDS, QUICK_ROUNDS);
    let (mut traced_ratios, mut control_ratios, mut off_rates) =
        (Vec::new(), Vec::new(), Vec::new());
    // Repeat 0 is the warm-up, not counted.
    for repeat in 0..=repeats {
        let mut busy = [Duration::ZERO; 3];
        for r in 0..rounds {
            for i in 0..SIDES.len() {
                let side = SIDES[(repeat * rounds + r + i) % SIDES.len()];
                reset(store.as_ref()).await?;
                let dispatch = if side == Side::Traced { traced } else { off };
                exporter.set_making_spans(side == Side::Traced);
                let _current = tracing::dispatcher::set_default(dispatch);
                busy[side as usize] += round(&mut guest, &fence).await?;
            }
        }
        exporter.set_making_spans(false);
        if repeat == 0 {
            continue;
        }
        let per_second = |d: Duration| (rounds * TASKS) as f64 / d.as_secs_f64();
        let [off_rate, traced_rate, control_rate] = busy.map(per_second);
        traced_ratios.extend(ratios(&[traced_rate], &[off_rate]));
        control_ratios.extend(ratios(&[control_rate], &[off_rate]));
        off_rates.push(off_rate);
    }
    Ok((traced_ratios, control_ratios, off_rates))
}

/// Reconcile every task once, each in the worker's reconcile span; the
/// time it took.
async fn round(guest: &mut GuestInstance, fence: &Fence) -> Result<Duration> {
    let started = Instant::now();
    for t in 0..TASKS {
        let task = key("tasks", &task_name(t));
        let span = reconcile_span(
            "scheduler",
            fence.epoch.0,
            &task,
            ReconcileReason::Change,
            &[],
        );
        let result = guest
            .reconcile_because(&task.kind, &task.name, ReconcileReason::Change)
            .instrument(span.clone())
            .await;
        telemetry::attribute(&span, "outcome", reconcile_outcome(&result));
        drop(span);
        let reply = result.map_err(|e| anyhow!("{e}"))?;
        ensure!(reply == Reconciled::Done, "reconcile: {reply:?}");
    }
    Ok(started.elapsed())
}

fn task_name(i: usize) -> String {
    format!("task-{i:03}")
}

/// Put every node and task back as it started (API writes).
async fn reset(store: &dyn Store) -> Result<()> {
    for n in 0..NODES {
        let value = format!("{{\"capacity\":{NODE_CAPACITY},\"zone\":\"eu-1\"}}");
        store
            .put(CLUSTER, &key("nodes", &format!("node-{n}")), &value, None)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    for t in 0..TASKS {
        let value = format!(
            "{{\"status\":\"pending\",\"command\":\"make test\",\"priority\":{}}}",
            t % 5
        );
        store
            .put(CLUSTER, &key("tasks", &task_name(t)), &value, None)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// An OTLP/HTTP receiver on a loopback port, on a thread of its own: reads
/// each request whole, counts it, answers 200 with an empty JSON
/// response. Stops with the process.
struct Receiver {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl Receiver {
    fn start() -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (counted, sized) = (requests.clone(), bytes.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    while let Ok((stream, _)) = listener.accept().await {
                        let (counted, sized) = (counted.clone(), sized.clone());
                        tokio::spawn(async move {
                            let service = service_fn(
                                move |request: hyper::Request<hyper::body::Incoming>| {
                                    let (counted, sized) = (counted.clone(), sized.clone());
                                    async move {
                                        let body = request.into_body().collect().await?.to_bytes();
                                        counted.fetch_add(1, Ordering::Relaxed);
                                        sized.fetch_add(body.len() as u64, Ordering::Relaxed);
                                        let mut response = hyper::Response::new(Full::new(
                                            Bytes::from_static(b"{}"),
                                        ));
                                        response.headers_mut().insert(
                                            hyper::header::CONTENT_TYPE,
                                            hyper::header::HeaderValue::from_static(
                                                "application/json",
                                            ),
                                        );
                                        Ok::<_, hyper::Error>(response)
                                    }
                                },
                            );
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                });
            })?;
        Ok(Self {
            addr,
            requests,
            bytes,
        })
    }
}
