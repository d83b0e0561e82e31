//! What TLS costs, side by side in one run:
//!
//! - **API reads over HTTPS vs plain HTTP** on one host (in process, the
//!   memory backend): keep-alive connections each sending `GET
//!   /v1/objects/nodes/n1` back to back for a short round; the HTTPS
//!   server (`[http] tls_cert`, a P-256 certificate of a CA the part makes
//!   with `openssl`) against the same router served in plaintext. The
//!   handshakes happen once per connection, before the timed round: the
//!   figure is the steady cost of encrypting keep-alive traffic. Goal:
//!   HTTPS / HTTP >= 0.8.
//! - **Store commits with `sslmode=require` vs `sslmode=disable`**: fenced
//!   commits (`Store::commit_fenced`) by 4 writers through a pool whose
//!   sessions are TLS against one whose are not, on one database. Goal:
//!   require / disable >= 0.9.
//!
//! Both interleave short rounds of the shapes and rotate which goes first;
//! a third shape, the plaintext one again (another server, other objects),
//! is the A/A control. Each repeat gives a ratio; the report prints min /
//! median / max and judges the goal on the median.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use leasehold_host::api::auth::Access;
use leasehold_host::api::{ApiState, ServeLimits, router, serve};
use leasehold_host::authority::ExpectedIdentity;
use leasehold_host::authority::memory::MemoryAuthority;
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::db::Database;
use leasehold_host::fence::Fence;
use leasehold_host::status::{DatabaseState, Status};
use leasehold_host::store::memory::MemoryStore;
use leasehold_host::store::{NewEvent, ObjectKey, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Scale;
use crate::report::{Comparison, Report, rate, ratios};
use crate::support;

/// The goal is judged only when the A/A control's median lies this close
/// to 1.00.
const NOISE: f64 = 0.05;
const PART: &str = "tls";
const CLUSTER: &str = "bench";
const REPEATS: usize = 7;
const QUICK_REPEATS: usize = 3;
/// Rounds of every shape in one repeat.
const ROUNDS: usize = 4;
const QUICK_ROUNDS: usize = 2;
/// How long one round of API reads runs.
const READ_ROUND: Duration = Duration::from_millis(400);
/// Keep-alive connections reading at once.
const READERS: usize = 4;
/// Writers committing at once, each under its own lease.
const WRITERS: usize = 4;
/// Commits per writer per round.
const COMMITS: usize = 16;
const READ_GOAL: f64 = 0.8;
const COMMIT_GOAL: f64 = 0.9;

/// The three shapes of each comparison: the one under test, its plaintext
/// baseline, and the baseline again (the A/A control).
const SHAPES: usize = 3;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        api_reads(scale, report).await?;
        commits(scale, report).await
    })
}

/// Each shape's throughput, one entry per repeat, measured by `round`
/// (which runs one round of shape `i` and returns its operations per
/// second), interleaved and rotated.
async fn interleaved<F, Fut>(scale: Scale, mut round: F) -> Result<[Vec<f64>; SHAPES]>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(usize, Duration)>>,
{
    // One unmeasured round of each: connections, plans and caches warm.
    for shape in 0..SHAPES {
        round(shape).await?;
    }
    let repeats = scale.pick(REPEATS, QUICK_REPEATS);
    let rounds = scale.pick(ROUNDS, QUICK_ROUNDS);
    let mut per_repeat: [Vec<f64>; SHAPES] = Default::default();
    for repeat in 0..repeats {
        let mut done = [(0usize, Duration::ZERO); SHAPES];
        for r in 0..rounds {
            for i in 0..SHAPES {
                let shape = (repeat * rounds + r + i) % SHAPES;
                let (n, took) = round(shape).await?;
                done[shape].0 += n;
                done[shape].1 += took;
            }
        }
        for shape in 0..SHAPES {
            per_repeat[shape].push(done[shape].0 as f64 / done[shape].1.as_secs_f64());
        }
    }
    Ok(per_repeat)
}

fn judge(
    report: &mut Report,
    measure: &str,
    throughput: &[Vec<f64>; SHAPES],
    goal: f64,
    unit: &str,
) -> Result<()> {
    let [tested, baseline, control] = throughput;
    let compared = Comparison::new(&ratios(tested, baseline), &ratios(control, baseline))
        .ok_or_else(|| anyhow!("no repeat measured"))?;
    report.compared_goal(
        PART,
        format!("{measure}, each of {} interleaved repeats", tested.len()),
        compared.ab.ratios(),
        &format!(">= {goal} (median)"),
        compared.ab.median >= goal,
        (&compared, NOISE),
    );
    report.info(PART, format!("{measure}: A/A control"), compared.control());
    let spread = |values: &[f64]| {
        crate::report::Spread::of(values).map_or_else(
            || "none".into(),
            |s| s.with(|v| format!("{} {unit}", rate(v))),
        )
    };
    report.info(
        PART,
        format!("{measure}: per repeat, tested; baseline"),
        format!("{}; {}", spread(tested), spread(baseline)),
    );
    Ok(())
}

/// `openssl` with `args`, in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let output = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .context("openssl is needed for the tls part")?;
    if !output.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A CA and a certificate of it for 127.0.0.1, in `dir`.
fn certificate(dir: &Path) -> Result<leasehold_host::tls::ServerFiles> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=bench CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(dir, &ca)?;
    let mut request = vec!["req"];
    request.extend(ec);
    request.extend([
        "-keyout",
        "api.key",
        "-out",
        "api.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &request)?;
    std::fs::write(
        dir.join("api.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "api.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "api.pem",
            "-days",
            "2",
            "-extfile",
            "api.ext",
        ],
    )?;
    Ok(leasehold_host::tls::ServerFiles {
        cert: dir.join("api.pem"),
        key: dir.join("api.key"),
        client_ca: None,
    })
}

/// Serve a fresh router over one memory store on an ephemeral port, with
/// `tls` when given; returns its address.
async fn api_server(
    store: Arc<MemoryStore>,
    authority: Arc<MemoryAuthority>,
    tls: Option<Arc<leasehold_host::tls::ServerTls>>,
) -> Result<SocketAddr> {
    let status = Arc::new(Status::new(CLUSTER.into(), "bench".into(), &[]));
    status.set_database(DatabaseState::Memory);
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let app = router(ApiState {
        cluster: CLUSTER.into(),
        holder: "bench".into(),
        status,
        authority,
        store,
        access: Arc::new(Access::open()),
        stopping,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        // The stop sender lives as long as the server: it never stops.
        let _stop = _stop;
        serve(
            listener,
            app,
            ServeLimits::for_this_process().0,
            tls,
            std::future::pending(),
        )
        .await;
    });
    Ok(addr)
}

/// A connection reading one object over and over (keep-alive).
struct Reader<S> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Reader<S> {
    /// One request and its whole response.
    async fn read_once(&mut self) -> Result<()> {
        self.stream
            .write_all(b"GET /v1/objects/nodes/n1 HTTP/1.1\r\nHost: bench\r\n\r\n")
            .await?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                if !head.starts_with("http/1.1 200") {
                    bail!("unexpected answer: {head}");
                }
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| anyhow!("no content-length"))?;
                while self.buf.len() < end + 4 + length {
                    let n = self.stream.read(&mut chunk).await?;
                    if n == 0 {
                        bail!("closed mid-body");
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                return Ok(());
            }
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("closed mid-head");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Reads done by `readers` in one round of [`READ_ROUND`].
async fn read_round<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    readers: &mut Vec<Reader<S>>,
) -> Result<(usize, Duration)> {
    let started = Instant::now();
    let deadline = started + READ_ROUND;
    let tasks: Vec<_> = readers
        .drain(..)
        .map(|mut reader| {
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    reader.read_once().await?;
                    n += 1;
                }
                Ok::<_, anyhow::Error>((reader, n))
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        let (reader, n) = task.await??;
        readers.push(reader);
        total += n;
    }
    Ok((total, started.elapsed()))
}

async fn api_reads(scale: Scale, report: &mut Report) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("leasehold-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let files = certificate(&dir)?;
    let server_tls = Arc::new(leasehold_host::tls::ServerTls::load(files)?);
    let roots = leasehold_host::tls::read_roots("ca", &dir.join("ca.pem"))?;
    let client = Arc::new(
        leasehold_host::tls::client_config(roots, leasehold_host::tls::Verify::Full, None)
            .map_err(|e| anyhow!(e))?,
    );
    let authority = Arc::new(MemoryAuthority::new());
    let store = Arc::new(MemoryStore::new(authority.clone()));
    store
        .put(
            CLUSTER,
            &support::key("nodes", "n1"),
            r#"{"capacity": 8, "zone": "a"}"#,
            None,
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let https = api_server(store.clone(), authority.clone(), Some(server_tls)).await?;
    let plain = api_server(store.clone(), authority.clone(), None).await?;
    let control = api_server(store.clone(), authority.clone(), None).await?;
    let mut tls_readers = Vec::new();
    for _ in 0..READERS {
        let tcp = TcpStream::connect(https).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let stream = tokio_rustls::TlsConnector::from(client.clone())
            .connect(name, tcp)
            .await?;
        tls_readers.push(Reader {
            stream,
            buf: Vec::new(),
        });
    }
    let mut plain_readers = [Vec::new(), Vec::new()];
    for (readers, addr) in plain_readers.iter_mut().zip([plain, control]) {
        for _ in 0..READERS {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            readers.push(Reader {
                stream,
                buf: Vec::new(),
            });
        }
    }
    let tls_readers = tokio::sync::Mutex::new(tls_readers);
    let plain_readers = tokio::sync::Mutex::new(plain_readers);
    let throughput = interleaved(scale, |shape| {
        let (tls_readers, plain_readers) = (&tls_readers, &plain_readers);
        async move {
            match shape {
                0 => read_round(&mut *tls_readers.lock().await).await,
                i => read_round(&mut plain_readers.lock().await[i - 1]).await,
            }
        }
    })
    .await?;
    let _ = std::fs::remove_dir_all(&dir);
    judge(
        report,
        &format!("API keep-alive reads, {READERS} connections: HTTPS / plain HTTP"),
        &throughput,
        READ_GOAL,
        "reads",
    )
}

async fn commits(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let with = |mode: &str| {
        let separator = if database.url().contains('?') {
            '&'
        } else {
            '?'
        };
        Database::new(
            &format!("{}{separator}sslmode={mode}", database.url()),
            WRITERS + 1,
        )
        .map_err(|e| anyhow!("{e}"))
    };
    let encrypted = with("require")?;
    let encrypted_tls = encrypted.tls().clone();
    let plain = with("disable")?;
    let control = with("disable")?;
    let authority = PostgresAuthority::connect(plain.clone(), ExpectedIdentity::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let stores = [encrypted, plain, control].map(|db| Arc::new(PostgresStore::new(db)));
    let mut fences: Vec<Fence> = Vec::new();
    for w in 0..WRITERS {
        fences.push(support::grant(&authority, CLUSTER, &format!("writer-{w}")).await?);
    }
    for (shape, store) in stores.iter().enumerate() {
        for w in 0..WRITERS {
            store
                .put(CLUSTER, &object(shape, w), "{\"n\":0}", Some(0))
                .await
                .map_err(|e| anyhow!("{e}"))?;
        }
    }
    // Whether the TLS pool's sessions really are encrypted (it would be
    // refused with `require` otherwise, but say it).
    let encrypted_now = encrypted_tls.encryption().known();
    let fences = Arc::new(fences);
    let throughput = interleaved(scale, |shape| {
        let (store, fences) = (stores[shape].clone(), fences.clone());
        async move { commit_round(store, fences, shape).await }
    })
    .await?;
    judge(
        report,
        &format!("fenced commits, {WRITERS} writers: sslmode=require / sslmode=disable"),
        &throughput,
        COMMIT_GOAL,
        "commits",
    )?;
    report.info(
        PART,
        "sessions of the sslmode=require pool encrypted",
        format!("{encrypted_now:?}"),
    );
    Ok(())
}

fn object(shape: usize, writer: usize) -> ObjectKey {
    support::key("counters", &format!("tls-{shape}-{writer}"))
}

/// Every writer makes [`COMMITS`] fenced commits of its object.
async fn commit_round(
    store: Arc<PostgresStore>,
    fences: Arc<Vec<Fence>>,
    shape: usize,
) -> Result<(usize, Duration)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, fences) = (store.clone(), fences.clone());
            tokio::spawn(async move {
                let key = object(shape, w);
                let mut version = store
                    .get(CLUSTER, &key)
                    .await
                    .map_err(|e| anyhow!("{e}"))?
                    .map(|o| o.version)
                    .unwrap_or_default();
                for i in 0..COMMITS {
                    let ops = [Op::Update {
                        key: key.clone(),
                        expected_version: version,
                        value: format!("{{\"n\":{i}}}"),
                    }];
                    let events = [NewEvent {
                        key: key.clone(),
                        reason: "Counted".into(),
                        message: String::new(),
                    }];
                    version = store
                        .commit_fenced(&fences[w], &ops, &events)
                        .await
                        .map_err(|e| anyhow!("{e}"))?
                        .revision;
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok((WRITERS * COMMITS, started.elapsed()))
}
