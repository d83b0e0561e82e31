//! Languages: the example scheduler written in Rust (`scheduler`), Python
//! (`scheduler-py`, componentize-py) and JavaScript (`scheduler-js`,
//! componentize-js), side by side in one run. Goal: a cached Python
//! controller's new-tenure instantiation p99 <= 5 ms (with the pooling
//! allocator, as the host runs it).
//!
//! Per language:
//!
//! - **Size** of the component file.
//! - **Compile, cold**: `Runtime::load` on a new engine (pooling, as the
//!   host builds it) whose on-disk cache folder is empty, so the time
//!   includes writing the artifact to the cache, as a host's first start
//!   does. **From the cache**: a new engine on the same folder loads the
//!   same file (a restarted host); the engine's cache tallies must show a
//!   hit and no compilation, or the part fails.
//! - **Instantiate**: a fresh `Store` plus instance from the cached
//!   controller (`CompiledController::instantiate`, the call the
//!   supervisor makes at each tenure's start), with and without the
//!   pooling allocator. The six configurations take turns in rounds, as in
//!   the `instantiate` part; dropping the instance is timed apart. Beside
//!   the wall clock, the thread's CPU time of each instantiation and how
//!   many were preempted (an involuntary context switch during the call):
//!   on a busy machine a millisecond-long call is often preempted for a
//!   whole time slice, which the wall clock's tail shows and the CPU time
//!   does not.
//! - **No-op reconcile rate**: back-to-back reconciles of a task already
//!   assigned (each language's scheduler reads it, sees it settled, returns
//!   `done`: one host call), in timed batches that take turns across the
//!   languages; min / median / max of the batches' rates.
//! - **Handover to the first reconcile**, in process on the memory
//!   backends: from the moment a tenure is known lost (its revocation is
//!   revoked) through dropping its instance, the release, the next grant
//!   (epoch + 1), instantiating, `describe`, to the return of the new
//!   tenure's first reconcile (the same no-op as above). Loss detection
//!   (the renew deadline) and the database are not in it; the `handover`
//!   part measures those between processes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail, ensure};
use leasehold_host::authority::{Authority as _, EndReason};
use leasehold_host::fence::Fence;
use leasehold_host::runtime::{
    CacheStats, CommitCounters, CompiledController, GuestInstance, Reconciled,
};
use leasehold_host::store::Store as _;

use crate::Scale;
use crate::report::{Report, Samples, Spread, duration, duration_spread, mib, rate, thousands};
use crate::support::{self, MemoryBackends, TempDir, key};

const PART: &str = "languages";
const CLUSTER: &str = "bench-languages";

/// A language and its build of the example scheduler.
struct Language {
    name: &'static str,
    component: &'static str,
}

const LANGUAGES: [Language; 3] = [
    Language {
        name: "Rust",
        component: "scheduler",
    },
    Language {
        name: "Python",
        component: "scheduler-py",
    },
    Language {
        name: "JavaScript",
        component: "scheduler-js",
    },
];
/// The language the instantiation goal holds.
const GOAL_LANGUAGE: &str = "Python";
const GOAL_INSTANTIATE: Duration = Duration::from_millis(5);

/// Cold compiles per language (each into an empty cache folder): the
/// interpreter components take seconds each, which bounds the repeats.
const COLD_REPEATS: usize = 2;
const QUICK_COLD_REPEATS: usize = 1;
/// Loads from the cache per language, each on a new engine.
const CACHED_REPEATS: usize = 5;
const QUICK_CACHED_REPEATS: usize = 2;
/// Instantiations measured per configuration, after a warm-up.
const INSTANTIATIONS: usize = 1000;
const QUICK_INSTANTIATIONS: usize = 50;
const WARMUP: usize = 50;
/// Instantiations of one configuration before the next takes its turn.
const ROUND: usize = 50;
/// Reconcile batches per language, each running for `BATCH_TIME`.
const BATCHES: usize = 7;
const QUICK_BATCHES: usize = 2;
const BATCH_TIME: Duration = Duration::from_millis(400);
const QUICK_BATCH_TIME: Duration = Duration::from_millis(100);
/// Handovers measured per language, after one unmeasured.
const HANDOVERS: usize = 60;
const QUICK_HANDOVERS: usize = 5;

/// The task every no-op reconcile reads: assigned already.
const SETTLED: &str = "settled";
const SETTLED_VALUE: &str = r#"{"status":"assigned","node":"node-0","command":"make test"}"#;
const NODE_VALUE: &str = r#"{"capacity":1000,"zone":"eu-1"}"#;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// One language's compiled controllers, read from the on-disk cache by a
/// pooling and an on-demand engine.
struct Cached {
    pooled: CompiledController,
    on_demand: CompiledController,
    /// Kept so the engines' cache folder outlives their use.
    _cache: TempDir,
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let backends = MemoryBackends::new();
    for (kind, name, value) in [
        ("nodes", "node-0", NODE_VALUE),
        ("tasks", SETTLED, SETTLED_VALUE),
    ] {
        backends
            .store
            .put(CLUSTER, &key(kind, name), value, None)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    for language in &LANGUAGES {
        let bytes = std::fs::metadata(support::guest(language.component)?)?.len();
        report.info(
            PART,
            format!("{}: component size ({})", language.name, language.component),
            format!("{} ({} bytes)", mib(bytes), thousands(bytes)),
        );
    }
    let mut cached = Vec::new();
    for language in &LANGUAGES {
        cached.push(compile_times(scale, report, language)?);
    }
    instantiation(scale, report, &backends, &cached).await?;
    reconcile_rates(scale, report, &backends, &cached).await?;
    for (language, compiled) in LANGUAGES.iter().zip(&cached) {
        handovers(scale, report, &backends, language, &compiled.pooled).await?;
    }
    Ok(())
}

/// A controller loaded by a new engine on `cache`, checked to have been
/// compiled (`cold`) or read from the cache (not `cold`), and how long
/// the load took.
fn load(
    language: &Language,
    cache: &Path,
    pooling: bool,
    cold: bool,
) -> Result<(CompiledController, Duration)> {
    let runtime = support::runtime_with_cache(pooling, Some(cache))?;
    let started = Instant::now();
    let compiled = support::compile(&runtime, language.component, language.component)?;
    let took = started.elapsed();
    let stats = runtime
        .cache_stats()
        .ok_or_else(|| anyhow!("the engine has no compile cache"))?;
    let expected = if cold {
        CacheStats { hits: 0, misses: 1 }
    } else {
        CacheStats { hits: 1, misses: 0 }
    };
    ensure!(
        stats == expected,
        "{} ({}): the engine's compile cache counted {stats:?}, expected {expected:?}",
        language.name,
        language.component
    );
    // The compiled controller keeps its engine (and so its epoch ticker);
    // the runtime's linker and cache handle can go.
    Ok((compiled, took))
}

fn compile_times(scale: Scale, report: &mut Report, language: &Language) -> Result<Cached> {
    let mut cold = Vec::new();
    let mut cache = None;
    for _ in 0..scale.pick(COLD_REPEATS, QUICK_COLD_REPEATS) {
        let dir = TempDir::new("languages-cache")?;
        let (_, took) = load(language, dir.path(), true, true)?;
        cold.push(took);
        // The last repeat's folder serves the cached loads.
        cache = Some(dir);
    }
    let cache = cache.ok_or_else(|| anyhow!("no cold compile ran"))?;
    let mut from_cache = Vec::new();
    let mut pooled = None;
    for _ in 0..scale.pick(CACHED_REPEATS, QUICK_CACHED_REPEATS) {
        let (compiled, took) = load(language, cache.path(), true, false)?;
        from_cache.push(took);
        pooled = Some(compiled);
    }
    let pooled = pooled.ok_or_else(|| anyhow!("no cached load ran"))?;
    let (on_demand, _) = load(language, cache.path(), false, false)?;
    report.info(
        PART,
        format!(
            "{}: compile, cold (new engine, empty on-disk cache, artifact written)",
            language.name
        ),
        duration_spread(&cold),
    );
    report.info(
        PART,
        format!(
            "{}: compile from the on-disk cache (new engine, as a restarted host)",
            language.name
        ),
        duration_spread(&from_cache),
    );
    Ok(Cached {
        pooled,
        on_demand,
        _cache: cache,
    })
}

/// One configuration of the instantiation measure.
struct Subject<'a> {
    label: String,
    goal: bool,
    compiled: &'a CompiledController,
    fence: Fence,
    created: Samples,
    /// The CPU time this thread spent in each instantiation: apart from
    /// `created`, what a busy machine's preemptions add to the wall clock.
    created_cpu: Samples,
    /// Instantiations during which this thread was preempted (an
    /// involuntary context switch).
    preempted: usize,
    dropped: Samples,
}

/// This thread's CPU time so far and its involuntary context switches.
fn thread_usage() -> (Duration, i64) {
    // SAFETY: both calls only write into the structs handed to them.
    unsafe {
        let mut cpu: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu);
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        (
            Duration::new(cpu.tv_sec as u64, cpu.tv_nsec as u32),
            usage.ru_nivcsw,
        )
    }
}

async fn instantiation(
    scale: Scale,
    report: &mut Report,
    backends: &MemoryBackends,
    cached: &[Cached],
) -> Result<()> {
    let runs = scale.pick(INSTANTIATIONS, QUICK_INSTANTIATIONS);
    let mut subjects = Vec::new();
    for (language, compiled) in LANGUAGES.iter().zip(cached) {
        for (allocator, compiled) in [
            ("pooling", &compiled.pooled),
            ("on-demand", &compiled.on_demand),
        ] {
            let lease = format!("{}-{allocator}", language.component);
            subjects.push(Subject {
                label: format!("{}, {allocator}", language.name),
                goal: language.name == GOAL_LANGUAGE && allocator == "pooling",
                compiled,
                fence: support::grant(backends.authority.as_ref(), CLUSTER, &lease).await?,
                created: Samples::with_capacity(runs),
                created_cpu: Samples::with_capacity(runs),
                preempted: 0,
                dropped: Samples::with_capacity(runs),
            });
        }
    }
    let counters = Arc::new(CommitCounters::default());
    let turns = support::rotation(subjects.len(), WARMUP, runs, ROUND);
    for (index, counted) in turns {
        let subject = &mut subjects[index];
        let revocation = subject.compiled.revocation();
        let (cpu_before, switches_before) = thread_usage();
        let started = Instant::now();
        let guest = support::instantiate(
            subject.compiled,
            subject.fence.clone(),
            backends.store.clone(),
            counters.clone(),
            revocation,
        )
        .await?;
        let made = started.elapsed();
        let (cpu_after, switches_after) = thread_usage();
        let started = Instant::now();
        drop(guest);
        let gone = started.elapsed();
        if counted {
            subject.created.push(made);
            subject
                .created_cpu
                .push(cpu_after.saturating_sub(cpu_before));
            subject.preempted += usize::from(switches_after > switches_before);
            subject.dropped.push(gone);
        }
    }
    for subject in &mut subjects {
        let measure = format!(
            "{}: new-tenure instantiation from the cached component (Store + instance)",
            subject.label
        );
        if subject.goal {
            let p99 = subject.created.p99();
            report.goal(
                PART,
                measure,
                subject.created.summary(),
                &format!("p99 <= {}", duration(GOAL_INSTANTIATE)),
                p99 <= GOAL_INSTANTIATE,
            );
        } else {
            report.info(PART, measure, subject.created.summary());
        }
        report.info(
            PART,
            format!(
                "{}: the same instantiations, this thread's CPU time (preemptions left out)",
                subject.label
            ),
            format!(
                "{}; preempted during {} of {}",
                subject.created_cpu.summary(),
                subject.preempted,
                subject.created.len()
            ),
        );
    }
    for subject in &mut subjects {
        report.info(
            PART,
            format!("{}: drop the instance", subject.label),
            subject.dropped.summary(),
        );
    }
    Ok(())
}

/// The no-op: reconcile the settled task.
async fn no_op(guest: &mut GuestInstance) -> Result<()> {
    let reply = guest
        .reconcile("tasks", SETTLED)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if reply != Reconciled::Done {
        bail!("a reconcile of the settled task answered {reply:?}, not done");
    }
    Ok(())
}

async fn reconcile_rates(
    scale: Scale,
    report: &mut Report,
    backends: &MemoryBackends,
    cached: &[Cached],
) -> Result<()> {
    let batches = scale.pick(BATCHES, QUICK_BATCHES);
    let batch_time = if scale.quick {
        QUICK_BATCH_TIME
    } else {
        BATCH_TIME
    };
    let mut guests = Vec::new();
    for (language, compiled) in LANGUAGES.iter().zip(cached) {
        let lease = format!("{}-reconcile", language.component);
        let fence = support::grant(backends.authority.as_ref(), CLUSTER, &lease).await?;
        let mut guest = support::tenure(
            &compiled.pooled,
            backends,
            fence,
            compiled.pooled.revocation(),
        )
        .await?;
        no_op(&mut guest).await?;
        guests.push(guest);
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); guests.len()];
    // Batch 0 warms up and is not counted; the languages take turns,
    // rotating which goes first.
    for batch in 0..=batches {
        for k in 0..guests.len() {
            let index = (batch + k) % guests.len();
            let guest = &mut guests[index];
            let started = Instant::now();
            let mut done = 0u64;
            while started.elapsed() < batch_time {
                no_op(guest).await?;
                done += 1;
            }
            if batch > 0 {
                rates[index].push(done as f64 / started.elapsed().as_secs_f64());
            }
        }
    }
    for (language, rates) in LANGUAGES.iter().zip(&rates) {
        let spread = Spread::of(rates).ok_or_else(|| anyhow!("no batch measured"))?;
        report.info(
            PART,
            format!(
                "{}: no-op reconciles per second (a settled task: one get, done)",
                language.name
            ),
            spread.with(rate),
        );
    }
    Ok(())
}

async fn handovers(
    scale: Scale,
    report: &mut Report,
    backends: &MemoryBackends,
    language: &Language,
    compiled: &CompiledController,
) -> Result<()> {
    let runs = scale.pick(HANDOVERS, QUICK_HANDOVERS);
    let lease = format!("{}-handover", language.component);
    let authority = backends.authority.as_ref();
    let mut fence = support::grant(authority, CLUSTER, &lease).await?;
    let mut revocation = compiled.revocation();
    let mut guest = support::tenure(compiled, backends, fence.clone(), revocation.clone()).await?;
    no_op(&mut guest).await?;
    let mut samples = Samples::with_capacity(runs);
    for i in 0..=runs {
        let started = Instant::now();
        // The loss, as the supervisor handles it: revoke, drop the
        // instance, end the tenure.
        revocation.revoke();
        drop(guest);
        authority
            .release(&fence, EndReason::Lost)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let next = support::grant(authority, CLUSTER, &lease).await?;
        ensure!(
            next.epoch.0 == fence.epoch.0 + 1,
            "the next tenure of {lease} is at {}, not {} + 1",
            next.epoch.0,
            fence.epoch.0
        );
        fence = next;
        revocation = compiled.revocation();
        guest = support::tenure(compiled, backends, fence.clone(), revocation.clone()).await?;
        no_op(&mut guest).await?;
        if i > 0 {
            samples.push(started.elapsed());
        }
    }
    report.info(
        PART,
        format!(
            "{}: handover, tenure lost -> next tenure's first reconcile returned (in process, memory backends)",
            language.name
        ),
        samples.summary(),
    );
    Ok(())
}
