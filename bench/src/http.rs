//! A minimal HTTP/1.1 client for talking to a `leasehold` process: one
//! request per connection, bounded in time and size. Enough for the API's
//! JSON without a client library in the build.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest one request may take (long polls ask for less).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// Largest response read.
const MAX_RESPONSE: u64 = 16 << 20;

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("response is not JSON: {}", self.body))
    }
}

/// Send one request to `addr` (host:port).
pub async fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> Result<Response> {
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let body = body.unwrap_or("");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str("\r\n");
        head.push_str(body);
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE)
            .read_to_end(&mut raw)
            .await?;
        parse(&raw)
    })
    .await
    .map_err(|_| anyhow!("{method} {path} on {addr} timed out"))?
}

fn parse(raw: &[u8]) -> Result<Response> {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("no header end in the response");
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in the response"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok(Response { status, body })
}

fn dechunk(mut body: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("bad chunked body")?;
        let size = usize::from_str_radix(size.trim(), 16).context("bad chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("short chunk")?);
        body = rest.get(size + 2..).context("short chunk")?;
    }
}

pub async fn get(addr: &str, path: &str) -> Result<Response> {
    request(addr, "GET", path, None).await
}

pub async fn put(addr: &str, path: &str, body: &str) -> Result<Response> {
    request(addr, "PUT", path, Some(body)).await
}

pub async fn delete(addr: &str, path: &str) -> Result<Response> {
    request(addr, "DELETE", path, None).await
}
