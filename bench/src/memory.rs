//! Memory: resident set size of one real `leasehold` process running 1, 10
//! and 100 idle controllers (copies of the example scheduler under
//! different names, each under its own lease, on PostgreSQL, pooling
//! allocator on), once every lease is held and the start-up resyncs are
//! done. Reported: RSS per count and the cost of each controller beyond
//! the first.
//!
//! While the controllers idle, the part also counts the database
//! transactions the process makes per second (renewals, the change feed's
//! fallback poll, identity re-checks): what a real host's lease upkeep
//! costs, batched or not. Counted by the server over a window of five
//! renew intervals, starting once start-up work has been reported (a
//! session reports its transactions up to ten seconds after it goes
//! idle); the ends of the window are as late as that, so the figure is
//! approximate.

use std::time::Duration;

use anyhow::{Context as _, Result};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::process::{Replica, eventually, free_port};
use crate::report::{Report, mib};
use crate::support::{self, Stats, TempDir};

const PART: &str = "memory";
const COUNTS: &[usize] = &[1, 10, 100];
const QUICK_COUNTS: &[usize] = &[1, 10];
const START_LIMIT: Duration = Duration::from_secs(180);
/// After every lease is held: let start-up work (resyncs, first renewals)
/// finish before reading the RSS.
const SETTLE: Duration = Duration::from_secs(3);
/// After the RSS is read, before idle transactions are counted: a session
/// reports its transactions to the server's statistics up to ten seconds
/// after it went idle, so start-up work must have been reported first.
const STATS_SETTLE: Duration = Duration::from_secs(11);
/// Window over which idle database transactions are counted: five renew
/// intervals at the default 2 s.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
const QUICK_IDLE_WINDOW: Duration = Duration::from_secs(4);
const EXIT_LIMIT: Duration = Duration::from_secs(30);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

fn config(cluster: &str, port: u16, url: &str, controllers: usize) -> Result<String> {
    let cache = support::component_cache();
    let scheduler = support::guest("scheduler")?;
    let mut text = format!(
        r#"
cluster = "{cluster}"
holder = "bench-replica"

[database]
url = "{url}"
max_connections = 16

[http]
listen = "127.0.0.1:{port}"

[runtime]
pooling = true
cache_dir = "{cache}"
"#,
        cache = cache.display(),
    );
    for i in 0..controllers {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"scheduler-{i:03}\"\ncomponent = \"{}\"\n",
            scheduler.display()
        ));
    }
    Ok(text)
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let name = support::database_name(database.url())?;
    let stats = Stats::connect().await?;
    let dir = TempDir::new("memory")?;
    let counts = if scale.quick { QUICK_COUNTS } else { COUNTS };
    let window = if scale.quick {
        QUICK_IDLE_WINDOW
    } else {
        IDLE_WINDOW
    };
    let mut first: Option<(usize, u64)> = None;
    for &count in counts {
        let cluster = format!("memory-{count}");
        let port = free_port()?;
        let mut replica = Replica::start(
            dir.path(),
            &cluster,
            port,
            &config(&cluster, port, database.url(), count)?,
        )?;
        replica.wait_healthy(START_LIMIT).await?;
        eventually(
            &format!("the replica holds all {count} leases"),
            START_LIMIT,
            || async { (replica.leases_held().await? == count).then_some(()) },
        )
        .await
        .with_context(|| replica.log_tail())?;
        tokio::time::sleep(SETTLE).await;
        let rss = replica.rss_bytes()?;
        tokio::time::sleep(STATS_SETTLE).await;
        let before = stats.transactions(&name).await?;
        tokio::time::sleep(window).await;
        let after = stats.transactions(&name).await?;
        let per_second = (after - before) as f64 / window.as_secs_f64();
        report.info(
            PART,
            format!("{count} idle controller(s): host RSS"),
            mib(rss),
        );
        match first {
            None => first = Some((count, rss)),
            Some((base_count, base_rss)) => report.info(
                PART,
                format!("per controller, from {base_count} to {count}"),
                mib(rss.saturating_sub(base_rss) / (count - base_count) as u64),
            ),
        }
        report.info(
            PART,
            format!("{count} idle controller(s): database transactions/s (approx.)"),
            format!("{per_second:.1}"),
        );
        replica.terminate()?;
        replica.wait_exit(EXIT_LIMIT).await?;
    }
    Ok(())
}
