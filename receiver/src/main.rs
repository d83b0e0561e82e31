//! `leasehold-receiver`: the fenced receiver as a process, for demos and
//! for tests that run it beside `leasehold` processes.
//!
//! Prints `listening on ADDR` on stdout once it accepts connections (with
//! `--listen 127.0.0.1:0`, ADDR names the port picked), then serves until
//! SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use leasehold_receiver::{Receiver, ReceiverConfig};
use tracing_subscriber::EnvFilter;

/// A fenced receiver: an HTTP "cloud" API (buckets) that refuses stale
/// Leasehold epochs with 409 and deduplicates by Idempotency-Key.
#[derive(Debug, Parser)]
#[command(name = "leasehold-receiver", version)]
struct Args {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// TEST/DEMO ONLY: enable POST /_faults, which makes the receiver hang,
    /// delay, drop connections or send endless bodies on purpose.
    #[arg(long)]
    test_hooks: bool,
    /// Append every record entry to this file as one JSON line, flushed per
    /// line.
    #[arg(long)]
    record_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("leasehold-receiver: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let config = ReceiverConfig {
        addr: args.listen,
        test_hooks: args.test_hooks,
        record_file: args.record_file,
    };
    let receiver = match Receiver::start(config).await {
        Ok(receiver) => receiver,
        Err(error) => {
            eprintln!("leasehold-receiver: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    // A parent process reads this line to learn the port.
    if writeln!(stdout, "listening on {}", receiver.local_addr())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        tracing::warn!("cannot write the listening address to stdout");
    }
    tracing::info!(addr = %receiver.local_addr(), "fenced receiver listening");
    if let Err(error) = stop_signal().await {
        eprintln!("leasehold-receiver: cannot wait for a stop signal: {error}");
        return ExitCode::FAILURE;
    }
    tracing::info!("stopping");
    receiver.shutdown().await;
    ExitCode::SUCCESS
}

/// SIGINT or SIGTERM.
async fn stop_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = term.recv() => Ok(()),
    }
}
