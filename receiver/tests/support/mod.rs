//! What the receiver's tests share: a small HTTP client (one connection per
//! request, so a connection the receiver drops fails only its own request)
//! and fenced request headers.

#![allow(dead_code)] // Each test file uses its own part of this module.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Longest any test waits for the receiver to do something it must do.
pub const TEST_WAIT: Duration = Duration::from_secs(10);

/// A whole answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A request to build.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub fn new(method: &'static str, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn get(path: impl Into<String>) -> Self {
        Self::new("GET", path)
    }

    /// A fenced `PUT /buckets/{name}` of `lease` at `epoch` with `key`.
    pub fn put(name: &str, lease: &str, epoch: u64, key: &str, spec: &Value) -> Self {
        Self::new("PUT", format!("/buckets/{name}"))
            .fence(lease, epoch)
            .header("idempotency-key", key)
            .body(spec.to_string())
    }

    /// A fenced `DELETE /buckets/{name}`.
    pub fn delete(name: &str, lease: &str, epoch: u64, key: &str) -> Self {
        Self::new("DELETE", format!("/buckets/{name}"))
            .fence(lease, epoch)
            .header("idempotency-key", key)
    }

    pub fn fence(self, lease: &str, epoch: u64) -> Self {
        self.header("leasehold-lease", lease)
            .header("leasehold-epoch", &epoch.to_string())
            .header("leasehold-holder", "host-a")
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Send it on a new connection; the response head (the body not read).
    pub async fn send_head(
        &self,
        addr: SocketAddr,
    ) -> Result<hyper::Response<Incoming>, hyper::Error> {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connect to the receiver");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("HTTP handshake");
        tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(self.method)
            .uri(&self.path)
            .header("host", addr.to_string());
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(self.body.clone())))
            .expect("a valid request");
        sender.send_request(request).await
    }

    /// Send it and read the whole answer.
    pub async fn send(&self, addr: SocketAddr) -> Reply {
        let response = self
            .send_head(addr)
            .await
            .unwrap_or_else(|e| panic!("{} {}: {e}", self.method, self.path));
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("read the body")
            .to_bytes()
            .to_vec();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }
}

/// Wait, bounded, until `condition` holds; panic naming `what` otherwise.
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TEST_WAIT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {TEST_WAIT:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
