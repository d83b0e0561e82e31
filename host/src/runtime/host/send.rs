//! Sending one guest request on the wire: a TCP connection, TLS with the
//! controller's trusted roots (the public ones, plus its `http_ca`), and
//! one HTTP/1.1 exchange.
//!
//! Owns: connecting within the connect timeout, the TLS handshake and the
//! error code a failed one becomes (a certificate that does not verify is
//! `TLS-certificate-error`, and no byte of the request has left), the
//! first-byte and between-bytes timeouts, and the request's one timer
//! ([`RequestClock`]) that carries them and the request's total bound.
//! Must never: send a byte of the request before the server's certificate
//! verified; trust a root other than the controller's. The admission rules
//! (fence, allow list, bounds) are [`super::http`]'s, applied before this is
//! called.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::uri::Scheme;
use ::http::{Request, Response, Uri};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// The I/O future of a sent request: drives the connection until the
/// response body is read, or fails.
pub(super) type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// The one timer of a request: armed at the earliest bound that applies
/// now (the phase's timeout, never later than the request's total bound),
/// and moved on as the request goes from phase to phase: connect, TLS and
/// handshake, first byte, then between bytes of the response body, which
/// takes the clock along.
///
/// One timer instead of one per bound, because registering a timer that
/// ends earlier than every other the runtime's timer wheel holds wakes the
/// thread parked on the I/O driver (a system call, and a context switch on
/// another core), while moving a registered timer to a later instant is an
/// atomic store. Each bound's own timer made about three such wake-ups a
/// request. What that saves has not been shown: the bench's `outbound`
/// part, run alternately with and without this clock on a shared 2-core
/// machine (six runs each), gave guest / native medians of 1.41x to 2.46x
/// and 1.60x to 1.85x, the same within its noise.
pub(super) struct RequestClock {
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// The request's total bound: no phase ends later.
    total: tokio::time::Instant,
}

impl RequestClock {
    /// A clock for a request that must end by `total` (not yet armed: the
    /// timer is registered when first polled).
    pub(super) fn new(total: tokio::time::Instant) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(total)),
            total,
        }
    }

    /// Arm the clock to ring `after` from now, or at the total bound if
    /// that comes first.
    fn arm(&mut self, after: Duration) {
        let at = tokio::time::Instant::now()
            .checked_add(after)
            .map_or(self.total, |at| at.min(self.total));
        self.sleep.as_mut().reset(at);
    }

    /// Whether the request's total bound has passed.
    pub(super) fn total_passed(&self) -> bool {
        tokio::time::Instant::now() >= self.total
    }

    /// Ready when the armed instant has passed.
    pub(super) fn poll_rung(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }

    /// Run `future` until it ends or the clock rings: `phase` is the error
    /// of the phase's own timeout, and the total bound's is
    /// `connection-read-timeout`.
    pub(super) async fn bound<T>(
        &mut self,
        phase: Error,
        future: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::pin!(future);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(done) = future.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            match self.poll_rung(cx) {
                Poll::Ready(()) => Poll::Ready(Err(self.timed_out(&phase))),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// The error of a clock that rang in a phase whose own timeout is
    /// `phase`.
    fn timed_out(&self, phase: &Error) -> Error {
        if self.total_passed() {
            Error::ConnectionReadTimeout
        } else {
            match phase {
                Error::ConnectionTimeout => Error::ConnectionTimeout,
                _ => Error::ConnectionReadTimeout,
            }
        }
    }
}

/// A connected stream, plain or TLS.
trait Wire: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Wire for T {}

/// Send `request` with `options` (every timeout set by the caller),
/// trusting `tls` for `https`, within `clock`'s total bound (past it, in
/// any phase, `connection-read-timeout`); the response body takes the
/// clock along.
pub(super) async fn send(
    request: Request<WasiBody>,
    options: RequestOptions,
    tls: Arc<rustls::ClientConfig>,
    mut clock: RequestClock,
) -> Result<(Response<WasiBody>, IoFuture), Error> {
    let connect_timeout = options.connect_timeout.unwrap_or(Duration::MAX);
    let first_byte_timeout = options.first_byte_timeout.unwrap_or(Duration::MAX);
    let between_bytes = options
        .between_bytes_timeout
        .unwrap_or(Duration::MAX)
        .max(Duration::from_nanos(1));
    let target = Target::of(request.uri())?;
    clock.arm(connect_timeout);
    let tcp = clock
        .bound(Error::ConnectionTimeout, target.connect())
        .await?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Wire> = if target.https {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let connector = tokio_rustls::TlsConnector::from(tls);
        clock.arm(connect_timeout);
        let handshake = async {
            connector
                .connect(name, tcp)
                .await
                .map_err(|e| tls_error(&e))
        };
        Box::new(clock.bound(Error::ConnectionTimeout, handshake).await?)
    } else {
        Box::new(tcp)
    };
    clock.arm(connect_timeout);
    let handshake = async {
        hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(Error::Hyper)
    };
    let (mut sender, connection) = clock.bound(Error::ConnectionTimeout, handshake).await?;
    // The request line names the path (and query) only: the authority is
    // in the Host header the request carries, as to any origin server.
    let (mut parts, body) = request.into_parts();
    parts.uri = Uri::builder()
        .path_and_query(
            parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string(),
        )
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let request = Request::from_parts(parts, body);
    // The connection makes progress only while polled: poll it beside the
    // exchange until the response head arrived, then hand it back.
    let mut connection = Box::pin(connection);
    clock.arm(first_byte_timeout);
    let exchange = sender.send_request(request);
    tokio::pin!(exchange);
    let mut connection_done = false;
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = exchange.as_mut().poll(cx) {
            return Poll::Ready(match answer {
                Ok(response) => Ok(response),
                Err(e) => Err(if e.is_timeout() {
                    Error::ConnectionReadTimeout
                } else {
                    Error::Hyper(e)
                }),
            });
        }
        if !connection_done && let Poll::Ready(ended) = connection.as_mut().poll(cx) {
            connection_done = true;
            if let Err(e) = ended {
                return Poll::Ready(Err(Error::Hyper(e)));
            }
        }
        match clock.poll_rung(cx) {
            // The first byte's timeout, or the total bound: either way a
            // read timeout.
            Poll::Ready(()) => Poll::Ready(Err(Error::ConnectionReadTimeout)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await?;
    let io: IoFuture = Box::new(async move {
        if connection_done {
            return Ok(());
        }
        connection.await.map_err(|e| {
            if e.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::Hyper(e)
            }
        })
    });
    clock.arm(between_bytes);
    let response = response.map(|incoming| {
        Paced {
            inner: incoming,
            between: between_bytes,
            clock,
        }
        .boxed_unsync()
    });
    Ok((response, io))
}

/// Where a request goes.
struct Target {
    host: String,
    port: u16,
    https: bool,
}

impl Target {
    fn of(uri: &Uri) -> Result<Self, Error> {
        let https = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(Error::HttpProtocolError),
        };
        let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
        // `[::1]` is written with brackets; the socket wants the address.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = match authority.port() {
            Some(port) => port.as_u16(),
            None if https => 443,
            None => 80,
        };
        Ok(Self { host, port, https })
    }

    async fn connect(&self) -> Result<TcpStream, Error> {
        let addresses = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|_| Error::DnsError {
                rcode: Some("address not found".to_string()),
                info_code: None,
            })?;
        let mut last = Error::DestinationNotFound;
        for address in addresses {
            match TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    last = Error::ConnectionRefused;
                }
                Err(_) => last = Error::DestinationUnavailable,
            }
        }
        Err(last)
    }
}

/// The error code of a failed TLS handshake: a certificate that does not
/// verify, an alert from the server, or any other protocol failure.
fn tls_error(error: &std::io::Error) -> Error {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => Error::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => Error::TlsProtocolError,
    }
}

/// A response body that fails when no byte arrives for `between`. It
/// carries the request's clock, armed at the between-bytes timeout or the
/// total bound, whichever comes first; at the total bound it only wakes
/// its reader, whose check of that bound ([`super::http`]'s `Bounded`, the
/// one that counts it as timed out) answers.
struct Paced {
    inner: hyper::body::Incoming,
    between: Duration,
    clock: RequestClock,
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let between = self.between;
                self.clock.arm(between);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::Hyper(e)
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.clock.poll_rung(cx) {
                Poll::Ready(()) if self.clock.total_passed() => {
                    // The reader checks the total bound before it reads.
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Poll::Ready(()) => Poll::Ready(Some(Err(Error::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Far beyond any of the bounds below: a hang detector.
    const HANG: Duration = Duration::from_secs(10);

    /// A server for one connection: it reads the request head, then writes
    /// each piece of `script` after its pause, then holds the connection
    /// until the client lets go.
    async fn server(script: Vec<(Duration, &'static [u8])>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            for (pause, bytes) in script {
                tokio::time::sleep(pause).await;
                if stream.write_all(bytes).await.is_err() {
                    return;
                }
            }
            let _ = stream.read(&mut buf).await;
        });
        addr
    }

    fn get(addr: SocketAddr) -> Request<WasiBody> {
        Request::builder()
            .uri(format!("http://{addr}/"))
            .header("host", addr.to_string())
            .body(
                http_body_util::Empty::<Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap()
    }

    fn options(first_byte: Duration, between_bytes: Duration) -> RequestOptions {
        RequestOptions {
            connect_timeout: Some(HANG),
            first_byte_timeout: Some(first_byte),
            between_bytes_timeout: Some(between_bytes),
        }
    }

    fn tls() -> Arc<rustls::ClientConfig> {
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        )
    }

    /// Send a GET to `addr` with the bounds given; the response's body with
    /// its connection driven beside it.
    async fn send_to(
        addr: SocketAddr,
        options: RequestOptions,
        total: Duration,
    ) -> Result<WasiBody, Error> {
        let clock = RequestClock::new(tokio::time::Instant::now() + total);
        let (response, io) = send(get(addr), options, tls(), clock).await?;
        tokio::spawn(Box::into_pin(io));
        Ok(response.into_body())
    }

    #[tokio::test]
    async fn no_first_byte_within_its_bound_is_a_read_timeout() {
        let addr = server(Vec::new()).await;
        let started = Instant::now();
        let sent = send_to(addr, options(Duration::from_millis(200), HANG), HANG).await;
        let took = started.elapsed();
        assert!(
            matches!(sent, Err(Error::ConnectionReadTimeout)),
            "{:?}",
            sent.err()
        );
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < HANG / 2, "{took:?}");
    }

    #[tokio::test]
    async fn the_total_bound_ends_the_wait_for_the_first_byte_before_its_own() {
        let addr = server(Vec::new()).await;
        let started = Instant::now();
        let sent = send_to(addr, options(HANG, HANG), Duration::from_millis(300)).await;
        let took = started.elapsed();
        assert!(
            matches!(sent, Err(Error::ConnectionReadTimeout)),
            "{:?}",
            sent.err()
        );
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < HANG / 2, "{took:?}");
    }

    #[tokio::test]
    async fn a_body_that_stalls_past_the_between_bytes_bound_fails_as_a_read_timeout() {
        let addr = server(vec![(
            Duration::ZERO,
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nx",
        )])
        .await;
        let started = Instant::now();
        let mut body = send_to(addr, options(HANG, Duration::from_millis(300)), HANG)
            .await
            .unwrap();
        let mut read = Vec::new();
        let error = loop {
            match body.frame().await {
                Some(Ok(frame)) => read.extend_from_slice(frame.data_ref().unwrap()),
                Some(Err(error)) => break error,
                None => panic!("the body ended after {read:?}"),
            }
        };
        let took = started.elapsed();
        assert!(matches!(error, Error::ConnectionReadTimeout), "{error:?}");
        assert_eq!(read, b"x");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < HANG / 2, "{took:?}");
    }

    #[tokio::test]
    async fn each_byte_within_the_between_bytes_bound_moves_it_on() {
        // Eight bytes 100 ms apart: 800 ms in all, well past one 500 ms
        // between-bytes bound, each well within it.
        let mut script: Vec<(Duration, &'static [u8])> = vec![(
            Duration::ZERO,
            b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n",
        )];
        script.extend((0..8).map(|_| (Duration::from_millis(100), &b"x"[..])));
        let addr = server(script).await;
        let started = Instant::now();
        let body = send_to(addr, options(HANG, Duration::from_millis(500)), HANG)
            .await
            .unwrap();
        let read = body.collect().await.map(|b| b.to_bytes());
        let took = started.elapsed();
        assert_eq!(read.unwrap(), &b"xxxxxxxx"[..]);
        assert!(took >= Duration::from_millis(800), "{took:?}");
    }
}
