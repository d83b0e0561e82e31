//! `leasehold`: the binary operators run. Parses the command line, sets up
//! logging, and hands over to the library; errors end here as one clear
//! message and a non-zero exit.
//!
//! Must never: print a database password (every URL shown goes through
//! `db::redact`), or hold logic the library's tests cannot reach.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{Authority, ExpectedIdentity, LeaseRecord, TenureRecord};
use leasehold_host::config::Config;
use leasehold_host::db::{self, Database};
use leasehold_host::fence::LeaseKey;
use leasehold_host::limits::MAX_HISTORY;
use leasehold_host::names::check_label;
use leasehold_host::telemetry::{self, Telemetry};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Log filter when neither --log-level nor RUST_LOG is given. The
/// PostgreSQL driver logs every server NOTICE (such as "relation already
/// exists, skipping" during migrations) at info; those are not news.
const DEFAULT_LOG_FILTER: &str = "info,tokio_postgres=warn";

const ABOUT: &str = "Runs controllers as WebAssembly components, each under its own \
fenced lease (in an embedded SQLite database, or PostgreSQL).";

const LONG_ABOUT: &str = "\
Runs controllers (reconcile loops) as WebAssembly components, each under its own \
lease in PostgreSQL. Every write a controller makes is stamped with its lease's \
fencing epoch and refused once that epoch is no longer current; a replica that \
loses a lease hard-aborts the controller's guest. Run several replicas against \
one database: each controller runs on exactly one of them at a time, and every \
replica serves the same HTTP API.

Without a database URL the embedded backend is used: SQLite in data_dir \
(leasehold-data beside the config), durable, shared by every host on this machine \
that names the same folder. [database] url = \"memory:\" keeps everything in one \
process's memory instead (not durable).";

const AFTER_HELP: &str = "\
Examples:
  Build the example controllers and run them on the embedded backend
  (state kept in examples/leasehold-data):
    cargo xtask guests
    leasehold run --config examples/leasehold.toml

  Check a config, its components and its database before deploying:
    leasehold check --config leasehold.toml

  Prepare PostgreSQL and print its identity (to pin in [database]):
    leasehold migrate --database-url postgres://postgres@127.0.0.1:5432/postgres

  See who leads which controller, and one lease's history:
    leasehold leases --config leasehold.toml
    leasehold leases --config leasehold.toml --history scheduler

Environment:
  LEASEHOLD_DATABASE_URL  overrides [database] url; default for --database-url
  LEASEHOLD_GUEST_DIR     what ${LEASEHOLD_GUEST_DIR} in a component path means
  LEASEHOLD_HOLDER        this host's holder name; overrides holder
  RUST_LOG                log filter, used when --log-level is not given";

#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP,
    propagate_version = true
)]
struct Cli {
    /// How log lines are written (to stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,

    /// Log filter: a level (error, warn, info, debug, trace) or directives
    /// such as `info,leasehold_host=debug`. Default: RUST_LOG if set, else
    /// info (PostgreSQL driver notices at warn).
    #[arg(long, global = true, value_name = "FILTER")]
    log_level: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Readable lines for a terminal.
    Human,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controllers and the HTTP API until SIGTERM or Ctrl-C.
    #[command(after_help = "\
Example:
  leasehold run --config examples/leasehold.toml

On SIGTERM or SIGINT the host stops taking work, lets each running reconcile
finish within the shutdown grace period, releases its leases (a standby
replica takes over at once) and exits 0.

On SIGHUP it re-reads the config file and applies its [[controllers]]: removed \
controllers stop and release their leases, added ones start, changed ones \
restart; the others keep running. A file it cannot apply whole is refused \
(every reason logged) and the host runs on unchanged.")]
    Run {
        /// The TOML config file.
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },

    /// Check a config, its components and its database; lead nothing.
    ///
    /// Checks every key and value (each controller's settings included),
    /// compiles every component against the controller world of the
    /// version it targets (leasehold:controller@0.1.0 or @0.2.0; any other
    /// version is refused, naming it), and verifies the database identity.
    /// Lists every problem and exits non-zero if there is any.
    #[command(after_help = "\
Example:
  leasehold check --config leasehold.toml")]
    Check {
        /// The TOML config file.
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },

    /// Create or upgrade the database schema and print its identity.
    ///
    /// Safe to run repeatedly and from several hosts at once.
    #[command(after_help = "\
Example:
  leasehold migrate --database-url postgres://postgres@127.0.0.1:5432/postgres

The identity it prints can be pinned in the config's [database] section
(expected_database_id, expected_system_identifier) so that a host pointed at
any other database refuses to lead.")]
    Migrate {
        /// PostgreSQL URL. Default: LEASEHOLD_DATABASE_URL, else
        /// postgres://postgres@127.0.0.1:5432/postgres.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
    },

    /// Show who holds each lease of a cluster, or one lease's history.
    ///
    /// Lists each lease's holder, epoch and expiry; with --history NAME,
    /// the tenures of that lease, newest first.
    #[command(after_help = "\
Examples:
  leasehold leases --config leasehold.toml
  leasehold leases --database-url postgres://postgres@127.0.0.1:5432/postgres --cluster demo
  leasehold leases --config leasehold.toml --history scheduler --json

Reads PostgreSQL, or the embedded backend's data directory, directly (a
config without a database URL reads its data_dir, beside running hosts).
SHARD (\"shard\" in JSON) names the sharded controller a lease runs and
which shard, index/count, as the config given with --config runs it, else
as the database records it. The in-memory backend's leases live inside
the running process: ask its API instead (GET /v1/leases).")]
    Leases {
        /// Take the database URL and cluster from this config.
        #[arg(long, short, value_name = "FILE", conflicts_with = "database_url")]
        config: Option<PathBuf>,
        /// PostgreSQL URL. Default: LEASEHOLD_DATABASE_URL, else
        /// postgres://postgres@127.0.0.1:5432/postgres.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
        /// The cluster (required without --config; overrides the config's).
        #[arg(long, value_name = "CLUSTER")]
        cluster: Option<String>,
        /// Show the tenure history of this lease (newest first) instead.
        #[arg(long, value_name = "NAME")]
        history: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Record a controller's sharding anew: the one way to change its
    /// shard count, shard label or every-shard kinds.
    ///
    /// Every host refuses to lead a controller's leases unless it runs the
    /// controller as the database records it (shards, the shard label and
    /// the kinds every shard watches, which the first host to lead it
    /// recorded). This records how the config runs CONTROLLER (its
    /// `shards`, and what its component describes), or with --forget
    /// forgets the record. Refused while any of its leases is held: stop
    /// it on every host first.
    #[command(after_help = "\
Example (2 shards to 3, every host stopped or the controller removed from
its config and reloaded first):
  leasehold leases --config leasehold.toml      # its leases show released
  leasehold reshard --config leasehold.toml scheduler
  # then start (or reload) every host with shards = 3

See docs/operations.md, \"Changing a controller's sharding\".")]
    Reshard {
        /// The TOML config file: the database, the cluster and the
        /// controller's new settings.
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
        /// The controller.
        controller: String,
        /// Forget the controller's record instead (it runs on no host any
        /// more, or another controller is to run one of its leases' names).
        #[arg(long)]
        forget: bool,
    },

    /// Rehearse a controller: run its component many times against a
    /// simulated world with seeded faults, and check its properties.
    ///
    /// The world file names the component, the objects it starts with,
    /// the simulated services it calls, what users do and when, the
    /// invariants (CEL) and the faults' weights. Each run prints seed=S
    /// and trace=DIGEST; --seed S --runs 1 repeats a run exactly. Exit 0:
    /// every run passed; 1: a run broke a property (its trace, the replay
    /// command and a shrunk trace are printed); 2: the file is wrong
    /// (naming the key).
    #[command(after_help = "\
Examples:
  leasehold sim examples/provisioner.sim.toml --runs 200
  leasehold sim examples/provisioner.sim.toml --seed 17 --runs 1
  leasehold sim examples/scheduler.sim.toml --steps 500 --json")]
    Sim(leasehold_host::sim::SimArgs),

    /// Write a new controller project: the controller, its unit tests
    /// against the language's fake host, a config, a world for `sim`.
    ///
    /// Writes into DIR (default ./NAME), which must not exist or be empty:
    /// the controller (it greets: each `greetings` object gets a status),
    /// its unit tests, leasehold.toml (with a commented http_allow),
    /// NAME.sim.toml, a README, and vendor/ (the SDK and the WIT this
    /// leasehold carries).
    #[command(after_help = "\
Examples:
  leasehold new rust greeter
  leasehold new python greeter --dir ~/src/greeter
  leasehold new js greeter && cd greeter && leasehold build")]
    New(leasehold_host::author::NewArgs),

    /// Build a controller project's component into build/NAME.wasm.
    ///
    /// Rust with cargo for wasm32-wasip2 (the target added with rustup
    /// when missing); Python with componentize-py and JavaScript with
    /// componentize-js, pinned as this leasehold's repository pins them
    /// and installed on first use into the user's cache
    /// (LEASEHOLD_CACHE_DIR, else $XDG_CACHE_HOME/leasehold, else
    /// ~/.cache/leasehold). A project without vendor/ gets this
    /// leasehold's SDK and WIT there first.
    #[command(after_help = "\
Examples:
  leasehold build
  leasehold build path/to/project

Environment:
  LEASEHOLD_CACHE_DIR  where the pinned tools are installed
  LEASEHOLD_PYTHON     the Python (3.11 or newer) the Python tools run on (default python3)
  LEASEHOLD_NODE       the Node.js (20 or newer) that runs the JavaScript tools (default node)
  LEASEHOLD_NPM        the npm that installs them (default npm)")]
    Build(leasehold_host::author::BuildArgs),

    /// Write a cluster's objects and each lease's highest epoch as JSON.
    ///
    /// From the embedded backend (--data-dir, or a config without a
    /// database URL) or PostgreSQL (--database-url, or a config with one),
    /// to standard output or --output. Refused while a lease of the
    /// cluster is held: stop its hosts first.
    #[command(after_help = "\
Examples:
  leasehold export --config examples/leasehold.toml --output demo.json
  leasehold import --database-url postgres://postgres@127.0.0.1:5432/postgres --input demo.json

Moving from PostgreSQL back to the embedded backend is the same, the other
way round. Object versions, events and tenure history are not moved; each
lease's next epoch is above the exported one.")]
    Export(leasehold_host::embedded::transfer::ExportArgs),

    /// Write an export into an empty cluster of another backend.
    ///
    /// Its objects are created (one commit each, attributed to the API
    /// token `import`) with their status, metadata, generation and deletion
    /// marks; each lease is recorded released at its exported epoch, so its
    /// next grant is above it. Refused while a lease of the cluster is held
    /// or the cluster has objects; into a data directory, while any host
    /// runs on it.
    #[command(after_help = "\
Example:
  leasehold import --data-dir leasehold-data --input demo.json")]
    Import(leasehold_host::embedded::transfer::ImportArgs),
}

pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` reads its config before the log is set up: where traces go is
    // part of that setup.
    let mut prepared = None;
    let mut exporting = None;
    if let Command::Run { config } = &cli.command {
        match prepare_run(config) {
            Ok((run, layer)) => {
                prepared = Some(run);
                exporting = layer;
            }
            Err(e) => {
                eprintln!("error: {}", db::scrub(&format!("{e:#}")));
                return ExitCode::FAILURE;
            }
        }
    }
    // A simulation's output is its report: the log says only errors
    // unless asked for more.
    let quiet = matches!(cli.command, Command::Sim(_)) && std::env::var_os("RUST_LOG").is_none();
    let level = cli.log_level.as_deref().or(quiet.then_some("error"));
    if let Err(e) = init_logging(cli.log_format, level, exporting) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let command = match cli.command {
        Command::Sim(args) => return leasehold_host::sim::command(args),
        // Authoring runs tools, not the service: no async runtime.
        Command::New(args) => return leasehold_host::author::new_command(args),
        Command::Build(args) => return leasehold_host::author::build_command(args),
        command => command,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(command, prepared)) {
        Ok(code) => code,
        Err(e) => {
            // Every error redacts its endpoint where it is made; this is
            // the last line of defence for text that came from elsewhere
            // (a server message, a parse error quoting its input).
            eprintln!("error: {}", db::scrub(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Log lines to stderr, filtered by `level` (else `RUST_LOG`, else the
/// default), and the trace exporter's layer when traces are exported. The
/// spans only traces carry ([`telemetry::SPAN_TARGET`]) never reach the
/// log.
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    exporting: Option<telemetry::ExportLayer>,
) -> anyhow::Result<()> {
    let filter = match level {
        Some(level) => EnvFilter::try_new(level)
            .with_context(|| format!("--log-level {level:?} is not a log filter"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(value) if !value.trim().is_empty() => EnvFilter::try_new(&value)
                .with_context(|| format!("RUST_LOG={value:?} is not a log filter"))?,
            _ => EnvFilter::new(DEFAULT_LOG_FILTER),
        },
    };
    let filter = filter.add_directive(
        format!("{}=off", telemetry::SPAN_TARGET)
            .parse()
            .expect("a fixed directive parses"),
    );
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Human => lines.boxed(),
        LogFormat::Json => lines.json().flatten_event(true).boxed(),
    };
    // Both must let a line through: the operator's filter, and the clamp
    // of third-party targets that can log values and queries.
    tracing_subscriber::registry()
        .with(exporting)
        .with(lines.with_filter(tracing_subscriber::filter::FilterExt::and(filter, clamp())))
        .try_init()
        .context("cannot install the log subscriber")?;
    Ok(())
}

/// The clamp of third-party targets that can log values and queries
/// ([`leasehold_host::log_clamp`]), as a filter beside the operator's.
///
/// It only ever removes lines, so it says so (a trace hint): the pair's
/// hint is then the operator's level, which becomes the global maximum.
/// Without it the pair has no hint, the maximum stays at trace, and every
/// `log` call in the compiler (Cranelift's register allocator logs at
/// trace in its inner loops) goes through the subscriber: compiling a
/// large component took several times longer in a debug build.
fn clamp() -> tracing_subscriber::filter::FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::FilterFn::new(
        leasehold_host::log_clamp::allows as fn(&tracing::Metadata<'_>) -> bool,
    )
    .with_max_level_hint(tracing_subscriber::filter::LevelFilter::TRACE)
}

/// What `run` needs before the log is set up: its config, and the trace
/// exporter when the config (or `OTEL_EXPORTER_OTLP_ENDPOINT`) names a
/// collector. Read once: a reload (SIGHUP) does not change where traces go.
struct PreparedRun {
    path: PathBuf,
    config: Config,
    exporter: Option<Telemetry>,
}

fn prepare_run(path: &Path) -> anyhow::Result<(PreparedRun, Option<telemetry::ExportLayer>)> {
    let config = Config::load(path)?;
    let (exporter, layer) =
        match Telemetry::start(&config.telemetry, config.holder(), &config.cluster)? {
            Some((exporter, layer)) => (Some(exporter), Some(layer)),
            None => (None, None),
        };
    let run = PreparedRun {
        path: path.to_path_buf(),
        config,
        exporter,
    };
    Ok((run, layer))
}

async fn dispatch(command: Command, prepared: Option<PreparedRun>) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run { .. } => match prepared {
            Some(prepared) => run(prepared).await,
            None => bail!("the run command's config was not read"),
        },
        Command::Check { config } => check(&config).await,
        Command::Reshard {
            config,
            controller,
            forget,
        } => reshard(&config, &controller, forget).await,
        // Run by `main` on a thread of its own, before this runtime exists.
        Command::Sim(_) => bail!("the sim command is not run on the service's runtime"),
        Command::New(_) | Command::Build(_) => {
            bail!("authoring commands are not run on the service's runtime")
        }
        Command::Migrate { database_url } => migrate(database_url).await,
        Command::Export(args) => leasehold_host::embedded::transfer::export_command(args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Import(args) => leasehold_host::embedded::transfer::import_command(args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Leases {
            config,
            database_url,
            cluster,
            history,
            json,
        } => leases(config, database_url, cluster, history, json).await,
    }
}

async fn run(prepared: PreparedRun) -> anyhow::Result<ExitCode> {
    let PreparedRun {
        path,
        config,
        exporter,
    } = prepared;
    let result = run_service(&path, config, exporter.as_ref()).await;
    if let Some(exporter) = exporter {
        // Flushes the spans still queued, the last tenure's included.
        let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
    }
    result
}

async fn run_service(
    path: &Path,
    config: Config,
    exporter: Option<&Telemetry>,
) -> anyhow::Result<ExitCode> {
    refuse_an_undeclared_unfenced_build()?;
    tracing::info!(
        config = %path.display(),
        cluster = config.cluster,
        holder = config.holder(),
        database = %config.database.endpoint(),
        "starting leasehold"
    );
    if let Some(exporter) = exporter {
        tracing::info!(
            endpoint = exporter.endpoint(),
            sample_ratio = config.telemetry.sample_ratio,
            "exporting traces (OTLP/HTTP)"
        );
    }
    leasehold_host::service::run(config, Some(path.to_path_buf())).await?;
    Ok(ExitCode::SUCCESS)
}

/// A build with the fence check compiled out leads nothing unless it is the
/// fault suite's `leasehold-unfenced` fixture, and that one says what it is
/// in the log too (see `leasehold_host::testing`).
fn refuse_an_undeclared_unfenced_build() -> anyhow::Result<()> {
    leasehold_host::testing::refuse_undeclared_unfenced_build()?;
    if leasehold_host::testing::FENCE_CHECK_COMPILED_OUT {
        tracing::warn!("{}", leasehold_host::testing::UNFENCED_TEST_BUILD_WARNING);
    }
    Ok(())
}

async fn check(path: &Path) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    let summary = format!(
        "config {}: cluster {}, holder {}, database {}, listen {}, {} controller(s)",
        path.display(),
        config.cluster,
        config.holder(),
        config.database.endpoint(),
        config.http.listen,
        config.controllers.len()
    );
    match leasehold_host::service::check(&config).await {
        Ok(notes) => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{summary}")?;
            for note in notes {
                // A warning is not a passed check: it stands on its own line.
                match note.strip_prefix("WARNING: ") {
                    Some(warning) => writeln!(out, "  warning: {warning}")?,
                    None => writeln!(out, "  ok: {note}")?,
                }
            }
            writeln!(out, "check passed")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            // One problem reads as one line; several get one line each.
            match problems.as_slice() {
                [one] => eprintln!("error: {}", db::scrub(one)),
                many => {
                    eprintln!("error: {} problems in {}:", many.len(), path.display());
                    for problem in many {
                        eprintln!("  {}", db::scrub(problem));
                    }
                }
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn reshard(path: &Path, controller: &str, forget: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    match leasehold_host::service::reshard(&config, controller, forget).await {
        Ok(done) => {
            println!("{done}");
            Ok(ExitCode::SUCCESS)
        }
        Err(refused) => {
            eprintln!("error: {}", db::scrub(&refused));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `--database-url`, else `LEASEHOLD_DATABASE_URL`, else the local default.
fn database_url(given: Option<String>) -> String {
    given
        .filter(|url| !url.trim().is_empty())
        .or_else(|| {
            std::env::var(db::URL_ENV)
                .ok()
                .filter(|url| !url.trim().is_empty())
        })
        .unwrap_or_else(|| db::DEFAULT_URL.to_string())
}

async fn migrate(given: Option<String>) -> anyhow::Result<ExitCode> {
    let url = database_url(given);
    // Unnamed statements: a one-shot command works through any pooler,
    // PgBouncer in transaction pooling included.
    let db = Database::new(&url, 2)?.with_pooler(db::Pooler::Transaction);
    let endpoint = db.endpoint().to_string();
    // The error names the endpoint already (password redacted).
    let applied = db.migrate().await?;
    let latest = db::MIGRATIONS.last().map_or(0, |(version, _)| *version);
    if applied.is_empty() {
        println!("database {endpoint}: schema is up to date (version {latest})");
    } else {
        let list: Vec<String> = applied.iter().map(ToString::to_string).collect();
        println!(
            "database {endpoint}: applied migration(s) {} (now at version {latest})",
            list.join(", ")
        );
    }
    let authority = PostgresAuthority::new(db, ExpectedIdentity::default());
    let identity = authority.identity().await?;
    if identity.in_recovery {
        println!("warning: the server is in recovery (a standby); hosts will refuse to lead here");
    }
    println!("# To pin this database, add to the config's [database] section:");
    println!("expected_database_id = \"{}\"", identity.database_id);
    println!(
        "expected_system_identifier = \"{}\"",
        identity.system_identifier
    );
    Ok(ExitCode::SUCCESS)
}

async fn leases(
    config: Option<PathBuf>,
    given_url: Option<String>,
    cluster: Option<String>,
    history: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Which leases are shards of which controller, as the config runs them
    // (else as the database records it, below).
    let mut shards = ShardMap::new();
    let (place, cluster) = match config {
        Some(path) => {
            let config = Config::load(&path)?;
            for controller in &config.controllers {
                for (lease, shard) in controller.leases() {
                    if let Some(shard) = shard {
                        shards.insert(lease, (controller.name.clone(), shard));
                    }
                }
            }
            let place = match config.database.backend() {
                leasehold_host::config::Backend::Postgres(url) => {
                    LeasesAt::Postgres(url.to_string())
                }
                leasehold_host::config::Backend::Embedded => {
                    LeasesAt::Embedded(config.data_dir.clone())
                }
                leasehold_host::config::Backend::Memory => bail!(
                    "{} uses the in-memory backend, whose leases live inside the running \
                     process; ask it instead: curl http://{}/v1/leases",
                    path.display(),
                    config.http.listen
                ),
            };
            (place, cluster.unwrap_or(config.cluster))
        }
        None => {
            let Some(cluster) = cluster else {
                bail!(
                    "which cluster? give --cluster NAME, or --config FILE to read it from a config"
                );
            };
            (LeasesAt::Postgres(database_url(given_url)), cluster)
        }
    };
    check_label("cluster", &cluster)?;
    let authority: Box<dyn Authority> = match place {
        LeasesAt::Postgres(url) => {
            // Unnamed statements, as `migrate`: through any pooler.
            let db = Database::new(&url, 2)?.with_pooler(db::Pooler::Transaction);
            Box::new(PostgresAuthority::new(db, ExpectedIdentity::default()))
        }
        // The data directory is shared: read beside the running hosts.
        LeasesAt::Embedded(dir) => {
            Box::new(leasehold_host::authority::sqlite::SqliteAuthority::new(
                leasehold_host::embedded::EmbeddedDb::open(
                    &dir,
                    leasehold_host::embedded::Access::Shared,
                )
                .await?,
            ))
        }
    };
    let mut out = std::io::stdout().lock();
    match history {
        Some(name) => {
            check_label("lease", &name)?;
            let key = LeaseKey::new(cluster, name);
            let tenures = authority.history(&key, MAX_HISTORY).await?;
            if json {
                let views: Vec<TenureOutput> = tenures.iter().map(TenureOutput::from).collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&views)?)?;
            } else if tenures.is_empty() {
                writeln!(out, "lease {key} was never granted")?;
            } else {
                write!(out, "{}", tenure_table(&tenures))?;
            }
        }
        None => {
            // A database not migrated to the record yet records nothing.
            let recorded = match authority.shardings(&cluster).await {
                Err(leasehold_host::authority::AuthorityError::Schema { .. }) => Vec::new(),
                recorded => recorded?,
            };
            for recorded in recorded {
                let rule = &recorded.rule;
                for (lease, index) in rule.leases() {
                    if let (Some(index), Some(count)) = (index, rule.shards) {
                        shards.entry(lease).or_insert_with(|| {
                            (
                                rule.controller.clone(),
                                leasehold_host::shard::Shard { index, count },
                            )
                        });
                    }
                }
            }
            let mut records = authority.observe(&cluster).await?;
            records.sort_by(|a, b| a.name.cmp(&b.name));
            if json {
                let views: Vec<LeaseOutput> = records
                    .iter()
                    .map(|r| LeaseOutput::new(r, shards.get(&r.name)))
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&views)?)?;
            } else if records.is_empty() {
                writeln!(out, "cluster {cluster} has no leases yet")?;
            } else {
                write!(out, "{}", lease_table(&records, &shards))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where `leasehold leases` reads.
enum LeasesAt {
    Postgres(String),
    Embedded(PathBuf),
}

/// One lease in `leasehold leases --json`: the printed contract, apart
/// from the authority's record so a rename inside cannot change it.
#[derive(Debug, serde::Serialize)]
struct LeaseOutput {
    name: String,
    holder: String,
    epoch: u64,
    acquired_at: chrono::DateTime<chrono::Utc>,
    expires_at: chrono::DateTime<chrono::Utc>,
    released: bool,
    active: bool,
    /// `"session"` or `"ttl"`: how the current tenure may be taken over if
    /// its holder dies.
    crash_detection: &'static str,
    /// The holder's liveness session the grant was made under, if known.
    holder_session: Option<SessionOutput>,
    /// The last time lease placement moved the lease, and why; null if it
    /// never did.
    last_move: Option<MoveOutput>,
    /// The shard of a sharded controller this lease runs, as the config
    /// given with `--config` runs it, else as the database records it;
    /// null for an unsharded controller's lease, or one of no record.
    shard: Option<ShardOutput>,
}

/// Lease name -> the sharded controller it runs, and which shard.
type ShardMap = std::collections::HashMap<String, (String, leasehold_host::shard::Shard)>;

/// A lease's shard in `leasehold leases --json` (as in `GET /v1/leases`).
#[derive(Debug, serde::Serialize)]
struct ShardOutput {
    controller: String,
    index: u32,
    count: u32,
}

/// A lease's last placement move in `leasehold leases --json`.
#[derive(Debug, serde::Serialize)]
struct MoveOutput {
    /// `"over_share"`, `"no_other_host"` or `"lapsed"`.
    reason: &'static str,
    at: chrono::DateTime<chrono::Utc>,
    /// Null when the grant that moved it was its first.
    from: Option<String>,
    to: String,
}

/// A holder's liveness session in `leasehold leases --json`.
#[derive(Debug, serde::Serialize)]
struct SessionOutput {
    pid: i32,
    backend_start: Option<chrono::DateTime<chrono::Utc>>,
}

impl LeaseOutput {
    fn new(r: &LeaseRecord, shard: Option<&(String, leasehold_host::shard::Shard)>) -> Self {
        Self {
            shard: shard.map(|(controller, shard)| ShardOutput {
                controller: controller.clone(),
                index: shard.index,
                count: shard.count,
            }),
            name: r.name.clone(),
            holder: r.holder.clone(),
            epoch: r.epoch.0,
            acquired_at: r.acquired_at,
            expires_at: r.expires_at,
            released: r.released,
            active: r.active,
            crash_detection: r.crash_detection.as_str(),
            holder_session: r.holder_session.as_ref().map(|s| SessionOutput {
                pid: s.pid,
                backend_start: s.backend_start,
            }),
            last_move: r.last_move.as_ref().map(|m| MoveOutput {
                reason: m.reason.as_str(),
                at: m.at,
                from: m.from.clone(),
                to: m.to.clone(),
            }),
        }
    }
}

/// One tenure in `leasehold leases --history NAME --json` (see
/// [`LeaseOutput`]).
#[derive(Debug, serde::Serialize)]
struct TenureOutput {
    epoch: u64,
    holder: String,
    endpoint: String,
    acquired_at: chrono::DateTime<chrono::Utc>,
    ended_at: Option<chrono::DateTime<chrono::Utc>>,
    end_reason: Option<&'static str>,
    writes: u64,
    last_write_at: Option<chrono::DateTime<chrono::Utc>>,
    outbound_requests: u64,
    last_outbound_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<&TenureRecord> for TenureOutput {
    fn from(t: &TenureRecord) -> Self {
        Self {
            epoch: t.epoch.0,
            holder: t.holder.clone(),
            endpoint: t.endpoint.clone(),
            acquired_at: t.acquired_at,
            ended_at: t.ended_at,
            end_reason: t.end_reason.map(|r| r.as_str()),
            writes: t.writes,
            last_write_at: t.last_write_at,
            outbound_requests: t.outbound_requests,
            last_outbound_at: t.last_outbound_at,
        }
    }
}

fn time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn lease_table(records: &[LeaseRecord], shards: &ShardMap) -> String {
    let rows = records
        .iter()
        .map(|r| {
            let state = if r.active {
                "held"
            } else if r.released {
                "released"
            } else {
                "expired"
            };
            let session = match &r.holder_session {
                Some(s) => match s.backend_start {
                    Some(start) => format!("pid {} since {}", s.pid, time(start)),
                    None => format!("pid {}", s.pid),
                },
                None => "-".to_string(),
            };
            let moved = match &r.last_move {
                Some(m) => format!(
                    "{} {} -> {} at {}",
                    m.reason.as_str(),
                    m.from.as_deref().unwrap_or("(none)"),
                    m.to,
                    time(m.at)
                ),
                None => "-".to_string(),
            };
            let shard = match shards.get(&r.name) {
                Some((controller, shard)) => {
                    format!("{controller} {}/{}", shard.index, shard.count)
                }
                None => "-".to_string(),
            };
            vec![
                r.name.clone(),
                shard,
                state.to_string(),
                r.holder.clone(),
                r.epoch.to_string(),
                time(r.acquired_at),
                time(r.expires_at),
                r.crash_detection.as_str().to_string(),
                session,
                moved,
            ]
        })
        .collect();
    table(
        &[
            "LEASE",
            "SHARD",
            "STATE",
            "HOLDER",
            "EPOCH",
            "ACQUIRED",
            "EXPIRES",
            "DETECTION",
            "SESSION",
            "LAST MOVE",
        ],
        rows,
    )
}

fn tenure_table(tenures: &[TenureRecord]) -> String {
    let rows = tenures
        .iter()
        .map(|t| {
            vec![
                t.epoch.to_string(),
                t.holder.clone(),
                time(t.acquired_at),
                t.ended_at.map_or_else(|| "-".to_string(), time),
                t.end_reason
                    .map_or("running", |reason| reason.as_str())
                    .to_string(),
                t.writes.to_string(),
                t.last_write_at.map_or_else(|| "-".to_string(), time),
                t.outbound_requests.to_string(),
                t.last_outbound_at.map_or_else(|| "-".to_string(), time),
                t.endpoint.clone(),
            ]
        })
        .collect();
    table(
        &[
            "EPOCH",
            "HOLDER",
            "ACQUIRED",
            "ENDED",
            "REASON",
            "WRITES",
            "LAST WRITE",
            "OUTBOUND",
            "LAST OUTBOUND",
            "ENDPOINT",
        ],
        rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn leases_take_a_config_or_a_url_not_both() {
        let error = Cli::try_parse_from([
            "leasehold",
            "leases",
            "--config",
            "a.toml",
            "--database-url",
            "postgres://x@y/z",
        ])
        .unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "leasehold",
            "check",
            "--config",
            "a.toml",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        assert!(matches!(cli.command, Command::Check { .. }));
    }

    /// The field names of a JSON object, in order.
    fn keys(value: &serde_json::Value) -> Vec<&str> {
        value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn leases_json_keeps_its_field_names() {
        use leasehold_host::authority::{
            CrashDetection, EndReason, HolderSession, MoveReason, PlacementMove,
        };
        use leasehold_host::fence::Epoch;
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let lease = LeaseRecord {
            name: "scheduler".into(),
            holder: "host-a".into(),
            epoch: Epoch(7),
            acquired_at: at,
            expires_at: at,
            released: false,
            active: true,
            crash_detection: CrashDetection::Session,
            holder_session: Some(HolderSession {
                pid: 4242,
                backend_start: Some(at),
            }),
            last_move: Some(PlacementMove {
                reason: MoveReason::OverShare,
                at,
                from: Some("host-b".into()),
                to: "host-a".into(),
            }),
        };
        let shard = (
            "scheduler".to_string(),
            leasehold_host::shard::Shard { index: 1, count: 3 },
        );
        let json = serde_json::to_value(LeaseOutput::new(&lease, Some(&shard))).unwrap();
        let mut names = keys(&json);
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "acquired_at",
                "active",
                "crash_detection",
                "epoch",
                "expires_at",
                "holder",
                "holder_session",
                "last_move",
                "name",
                "released",
                "shard"
            ]
        );
        let mut sharded = keys(&json["shard"]);
        sharded.sort_unstable();
        assert_eq!(sharded, ["controller", "count", "index"]);
        assert_eq!(json["shard"]["controller"], "scheduler");
        assert_eq!(json["shard"]["index"], 1);
        assert_eq!(json["shard"]["count"], 3);
        let unsharded = serde_json::to_value(LeaseOutput::new(&lease, None)).unwrap();
        assert!(unsharded["shard"].is_null());
        let mut moved = keys(&json["last_move"]);
        moved.sort_unstable();
        assert_eq!(moved, ["at", "from", "reason", "to"]);
        assert_eq!(json["last_move"]["reason"], "over_share");
        assert_eq!(json["last_move"]["at"], "2023-11-14T22:13:20Z");
        assert_eq!(json["last_move"]["from"], "host-b");
        assert_eq!(json["last_move"]["to"], "host-a");
        assert_eq!(json["epoch"], 7);
        assert_eq!(json["acquired_at"], "2023-11-14T22:13:20Z");
        assert_eq!(json["crash_detection"], "session");
        let mut session = keys(&json["holder_session"]);
        session.sort_unstable();
        assert_eq!(session, ["backend_start", "pid"]);
        assert_eq!(json["holder_session"]["pid"], 4242);
        assert_eq!(
            json["holder_session"]["backend_start"],
            "2023-11-14T22:13:20Z"
        );
        let shards = ShardMap::from([(lease.name.clone(), shard)]);
        let table = lease_table(std::slice::from_ref(&lease), &shards);
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("LEASE      SHARD          STATE")
                && header.contains("DETECTION  SESSION")
                && header.ends_with("  LAST MOVE"),
            "{table}"
        );
        let row = lines.next().unwrap();
        assert!(row.starts_with("scheduler  scheduler 1/3  held"), "{table}");
        assert!(
            row.ends_with(
                "session    pid 4242 since 2023-11-14T22:13:20.000Z  \
                 over_share host-b -> host-a at 2023-11-14T22:13:20.000Z"
            ),
            "{table}"
        );
        let ttl = LeaseRecord {
            crash_detection: CrashDetection::Ttl,
            holder_session: None,
            last_move: None,
            ..lease.clone()
        };
        let json = serde_json::to_value(LeaseOutput::new(&ttl, None)).unwrap();
        assert_eq!(json["crash_detection"], "ttl");
        assert!(json["holder_session"].is_null(), "{json}");
        assert!(json["last_move"].is_null(), "{json}");
        let table = lease_table(std::slice::from_ref(&ttl), &ShardMap::new());
        let cells: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(cells[cells.len() - 3..], ["ttl", "-", "-"], "{table}");

        let tenure = TenureRecord {
            epoch: Epoch(7),
            holder: "host-a".into(),
            endpoint: "postgres://u@db/x".into(),
            acquired_at: at,
            ended_at: Some(at),
            end_reason: Some(EndReason::Superseded),
            writes: 3,
            last_write_at: None,
            outbound_requests: 2,
            last_outbound_at: Some(at),
        };
        let json = serde_json::to_value(TenureOutput::from(&tenure)).unwrap();
        let mut names = keys(&json);
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "acquired_at",
                "end_reason",
                "ended_at",
                "endpoint",
                "epoch",
                "holder",
                "last_outbound_at",
                "last_write_at",
                "outbound_requests",
                "writes"
            ]
        );
        assert_eq!(json["end_reason"], "superseded");
        assert_eq!(json["epoch"], 7);
        assert_eq!(json["last_write_at"], serde_json::Value::Null);
        assert_eq!(json["outbound_requests"], 2);
        assert_eq!(json["last_outbound_at"], "2023-11-14T22:13:20Z");

        let text = tenure_table(std::slice::from_ref(&tenure));
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(
            header.contains("WRITES  LAST WRITE  OUTBOUND  LAST OUTBOUND"),
            "{header}"
        );
        let row = lines.next().unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(
            cells
                .windows(4)
                .any(|w| w == ["3", "-", "2", "2023-11-14T22:13:20.000Z"]),
            "{row}"
        );
    }

    #[test]
    fn the_log_level_bounds_what_reaches_the_subscriber() {
        use tracing_subscriber::filter::{FilterExt, LevelFilter};
        use tracing_subscriber::layer::Filter;
        let both = EnvFilter::new(DEFAULT_LOG_FILTER).and(clamp());
        assert_eq!(
            Filter::<tracing_subscriber::Registry>::max_level_hint(&both),
            Some(LevelFilter::INFO)
        );
        let verbose = EnvFilter::new("debug").and(clamp());
        assert_eq!(
            Filter::<tracing_subscriber::Registry>::max_level_hint(&verbose),
            Some(LevelFilter::DEBUG)
        );
    }

    #[test]
    fn tables_align_columns() {
        let text = table(&["A", "LONGER"], vec![vec!["wide-cell".into(), "x".into()]]);
        assert_eq!(text, "A          LONGER\nwide-cell  x\n");
    }
}
