//! A minimal HTTP/1.1 client for tests: one request per connection, bounded
//! in time and size. Enough to talk to a `leasehold` replica without
//! pulling a full client library into the test build.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a test request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response a test reads.
const MAX_RESPONSE: usize = 8 << 20;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.body))
    }
}

/// Send one request to `addr` (host:port).
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Response> {
    request_within(REQUEST_TIMEOUT, addr, method, path, headers, body).await
}

/// [`request`] with another time limit: a stopped (SIGSTOP) replica
/// accepts connections but never answers, and a fault test must not wait
/// the default ten seconds on it.
pub async fn request_within(
    limit: Duration,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Response> {
    tokio::time::timeout(limit, async {
        let stream = TcpStream::connect(addr).await?;
        exchange(stream, addr, method, path, headers, body).await
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out"))?
}

/// Write one request on `stream` and read its whole response (the request
/// asks the server to close the connection after it).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Response> {
    {
        let body = body.unwrap_or("");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        // JSON unless the caller names its own content type.
        let typed = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !typed {
            head.push_str("Content-Type: application/json\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        match (&mut stream)
            .take(MAX_RESPONSE as u64)
            .read_to_end(&mut raw)
            .await
        {
            Ok(_) => {}
            // A TLS peer that closes without close_notify after a whole
            // response: what was read is the answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(e),
        }
        parse(&raw)
    }
}

/// A test client's TLS: the CA it trusts and, for mutual TLS, the
/// certificate it presents.
#[derive(Clone)]
pub struct ClientTls {
    config: std::sync::Arc<rustls::ClientConfig>,
}

impl ClientTls {
    /// Trust `ca` (PEM) only; present no certificate.
    pub fn trusting(ca: &std::path::Path) -> Self {
        Self::build(ca, None)
    }

    /// Trust `ca` and present `cert` with its `key` (PEM files).
    pub fn presenting(ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Self {
        Self::build(ca, Some((cert, key)))
    }

    fn build(ca: &std::path::Path, identity: Option<(&std::path::Path, &std::path::Path)>) -> Self {
        use leasehold_host::tls;
        let roots = tls::read_roots("ca", ca).expect("read the test CA");
        let identity = identity.map(|(cert, key)| {
            (
                tls::read_certificates("cert", cert).expect("read the client certificate"),
                tls::read_private_key("key", key).expect("read the client key"),
            )
        });
        let config =
            tls::client_config(roots, tls::Verify::Full, identity).expect("a client configuration");
        Self {
            config: std::sync::Arc::new(config),
        }
    }
}

/// One request over TLS to `addr` (`127.0.0.1:PORT`, verified as
/// `127.0.0.1`), with the server's certificate (DER) it presented.
pub async fn request_tls(
    tls: &ClientTls,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<(Response, Vec<u8>)> {
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        let tcp = TcpStream::connect(addr).await?;
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
            .connect(name, tcp)
            .await?;
        let served = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.as_ref().to_vec())
            .unwrap_or_default();
        let response = exchange(stream, addr, method, path, headers, body).await?;
        Ok((response, served))
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out"))?
}

fn parse(raw: &[u8]) -> std::io::Result<Response> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok(Response { status, body })
}

fn dechunk(mut body: &str) -> std::io::Result<String> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunked body");
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or_else(bad)?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad())?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).ok_or_else(bad)?);
        body = rest.get(size + 2..).ok_or_else(bad)?;
    }
}

/// GET `path`.
pub async fn get(addr: &str, path: &str) -> std::io::Result<Response> {
    request(addr, "GET", path, &[], None).await
}

/// PUT `body` at `path`.
pub async fn put(addr: &str, path: &str, body: &str) -> std::io::Result<Response> {
    request(addr, "PUT", path, &[], Some(body)).await
}
