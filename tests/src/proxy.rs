//! A TCP fault proxy between a host and PostgreSQL, controlled by the test:
//! pass traffic, black-hole it (a partition: connections stay open but
//! nothing flows), reset every connection, or add latency.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Accept and hold connections, forward nothing (a partition).
    Blackhole,
    /// Close every open connection and refuse new ones.
    Reset,
    /// Forward with this delay per chunk.
    Latency(Duration),
}

/// A running proxy; dropping it stops it.
pub struct FaultProxy {
    addr: std::net::SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listen on a free loopback port and forward to `upstream`.
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(watch::Sender::new(Mode::Pass));
        let task_mode = mode.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mode_rx = task_mode.subscribe();
                if *mode_rx.borrow() == Mode::Reset {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, upstream, mode_rx));
            }
        });
        Self { addr, mode, task }
    }

    /// The address hosts should connect to.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Change what the proxy does, for open and new connections.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.mode.send_replace(Mode::Reset);
    }
}

async fn relay(client: TcpStream, upstream: std::net::SocketAddr, mode: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, mode.clone());
    let down = pump(server_read, client_write, mode);
    // When either direction ends (or is reset), drop both halves.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Mode::Reset {
                    return;
                }
                continue;
            }
        };
        // Hold the chunk while black-holed; give up on reset.
        loop {
            let current = *mode.borrow_and_update();
            match current {
                Mode::Pass => break,
                Mode::Latency(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Mode::Reset => return,
                Mode::Blackhole => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
