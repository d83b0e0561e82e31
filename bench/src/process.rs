//! Real `leasehold` processes for the parts that need them (handover, end
//! to end, memory): each replica gets its own config file, port and log
//! file, and is killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::process::{Child, Command};

use crate::http;
use crate::support;

/// How often a wait polls another process's observable state (there is no
/// notification to subscribe to across processes).
const POLL: Duration = Duration::from_millis(10);
/// Lines of a replica's log shown when it misbehaves.
const LOG_TAIL_LINES: usize = 30;
/// Leases read per `/v1/leases` page (the API's largest page).
const LEASE_PAGE: usize = 500;

/// A loopback port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One running (or stopped) `leasehold run` process.
pub struct Replica {
    pub name: String,
    /// host:port of its HTTP API.
    pub addr: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// Write `config` (TOML, listening on `port`) into `dir` and start
    /// `leasehold run` on it.
    pub fn start(dir: &Path, name: &str, port: u16, config: &str) -> Result<Self> {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        let mut replica = Self {
            name: name.to_string(),
            addr: format!("127.0.0.1:{port}"),
            config: path,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        replica.spawn()?;
        Ok(replica)
    }

    fn spawn(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(support::leasehold_binary()?)
            .args(["run", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .kill_on_drop(true)
            .spawn()
            .context("starting leasehold")?;
        self.child = Some(child);
        Ok(())
    }

    /// Start it again after it stopped.
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("{} is still running", self.name);
        }
        self.spawn()
    }

    pub fn pid(&self) -> Result<u32> {
        self.child
            .as_ref()
            .and_then(Child::id)
            .ok_or_else(|| anyhow!("{} is not running", self.name))
    }

    /// SIGTERM: the orderly shutdown.
    pub fn terminate(&self) -> Result<()> {
        let pid = self.pid()?;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM {pid} failed");
        }
        Ok(())
    }

    /// SIGKILL, and reap it.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Wait for the process to exit on its own.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<()> {
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| anyhow!("{} is not running", self.name))?;
        tokio::time::timeout(limit, child.wait())
            .await
            .map_err(|_| anyhow!("{} did not exit within {limit:?}", self.name))??;
        self.child = None;
        Ok(())
    }

    /// The end of the replica's log, for error messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// Wait until `/healthz` answers.
    pub async fn wait_healthy(&self, limit: Duration) -> Result<()> {
        eventually(&format!("{} is healthy", self.name), limit, || async {
            http::get(&self.addr, "/healthz")
                .await
                .ok()
                .filter(|r| r.status == 200)
                .map(|_| ())
        })
        .await
        .with_context(|| format!("log of {}:\n{}", self.name, self.log_tail()))
    }

    /// The state `/readyz` reports for `controller` (`leading`, `standby`,
    /// ...), if it answers.
    pub async fn controller_state(&self, controller: &str) -> Option<String> {
        let response = http::get(&self.addr, "/readyz").await.ok()?;
        let json = response.json().ok()?;
        json["controllers"][controller]["state"]
            .as_str()
            .map(str::to_string)
    }

    /// How many leases `/v1/leases` says this replica holds, over every
    /// page of the list.
    pub async fn leases_held(&self) -> Option<usize> {
        let mut held = 0;
        let mut path = format!("/v1/leases?limit={LEASE_PAGE}");
        loop {
            let response = http::get(&self.addr, &path).await.ok()?;
            let page = response.json().ok()?;
            held += page["items"]
                .as_array()?
                .iter()
                .filter(|l| l["held_here"] == true)
                .count();
            match page["next"].as_str() {
                Some(after) => path = format!("/v1/leases?limit={LEASE_PAGE}&after={after}"),
                None => return Some(held),
            }
        }
    }

    /// Resident set size of the process, from procfs.
    pub fn rss_bytes(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| anyhow!("no VmRSS in /proc status"))
    }
}

/// Poll `probe` until it returns `Some`, or fail naming `what` after
/// `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if started.elapsed() > limit {
            bail!("timed out after {limit:?} waiting until {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}
