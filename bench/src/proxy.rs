//! A TCP proxy between one replica and PostgreSQL that the handover part
//! can partition: while black-holed, connections stay open but nothing
//! flows in either direction, as when a network path silently drops
//! packets. When the path heals, connections that lost bytes are closed.

use std::net::SocketAddr;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes relayed per read.
const CHUNK: usize = 16 * 1024;

/// A running proxy; dropping it stops accepting (open relays end when
/// either side closes).
pub struct Proxy {
    addr: SocketAddr,
    partitioned: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let partitioned = watch::Sender::new(false);
        let mode = partitioned.subscribe();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, mode.clone()));
            }
        });
        Ok(Self {
            addr,
            partitioned,
            task,
        })
    }

    /// Where the replica should connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cut (or heal) the path, for open and new connections alike.
    pub fn partition(&self, cut: bool) {
        self.partitioned.send_replace(cut);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, mode: watch::Receiver<bool>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, mode.clone()) => {}
        _ = pump(server_read, client_write, mode) => {}
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut cut: watch::Receiver<bool>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if *cut.borrow_and_update() {
            // Lost in the partition: hold the connection open and silent
            // until the path heals, then drop it rather than deliver stale
            // bytes (as TCP would, having given up on them).
            let _ = cut.wait_for(|cut| !*cut).await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
