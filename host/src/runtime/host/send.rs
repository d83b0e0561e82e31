//! Sending one guest request on the wire: a TCP connection, TLS with the
//! controller's trusted roots (the public ones, plus its `http_ca`), and
//! one HTTP/1.1 exchange.
//!
//! Owns: connecting within the connect timeout, the TLS handshake and the
//! error code a failed one becomes (a certificate that does not verify is
//! `TLS-certificate-error`, and no byte of the request has left), the
//! first-byte and between-bytes timeouts. Must never: send a byte of the
//! request before the server's certificate verified; trust a root other
//! than the controller's. The admission rules (fence, allow list, bounds)
//! are [`super::http`]'s, applied before this is called.

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

/// A connected stream, plain or TLS.
trait Wire: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Wire for T {}

/// Send `request` with `options` (every timeout set by the caller),
/// trusting `tls` for `https`.
pub(super) async fn send(
    request: Request<WasiBody>,
    options: RequestOptions,
    tls: Arc<rustls::ClientConfig>,
) -> Result<(Response<WasiBody>, IoFuture), Error> {
    let connect_timeout = options.connect_timeout.unwrap_or(Duration::MAX);
    let first_byte_timeout = options.first_byte_timeout.unwrap_or(Duration::MAX);
    let between_bytes = options
        .between_bytes_timeout
        .unwrap_or(Duration::MAX)
        .max(Duration::from_nanos(1));
    let target = Target::of(request.uri())?;
    let tcp = match tokio::time::timeout(connect_timeout, target.connect()).await {
        Ok(connected) => connected?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Wire> = if target.https {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let connector = tokio_rustls::TlsConnector::from(tls);
        match tokio::time::timeout(connect_timeout, connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => Box::new(stream),
            Ok(Err(e)) => return Err(tls_error(&e)),
            Err(_) => return Err(Error::ConnectionTimeout),
        }
    } else {
        Box::new(tcp)
    };
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)?
    .map_err(Error::Hyper)?;
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
    let exchange = tokio::time::timeout(first_byte_timeout, sender.send_request(request));
    tokio::pin!(exchange);
    let mut connection_done = false;
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = exchange.as_mut().poll(cx) {
            return Poll::Ready(match answer {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(e)) => Err(if e.is_timeout() {
                    Error::ConnectionReadTimeout
                } else {
                    Error::Hyper(e)
                }),
                Err(_) => Err(Error::ConnectionReadTimeout),
            });
        }
        if !connection_done && let Poll::Ready(ended) = connection.as_mut().poll(cx) {
            connection_done = true;
            if let Err(e) = ended {
                return Poll::Ready(Err(Error::Hyper(e)));
            }
        }
        Poll::Pending
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
    let response = response.map(|incoming| {
        Paced {
            inner: incoming,
            between: between_bytes,
            deadline: Box::pin(tokio::time::sleep(between_bytes)),
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

/// A response body that fails when no byte arrives for `between`.
struct Paced {
    inner: hyper::body::Incoming,
    between: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
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
                if let Some(next) = tokio::time::Instant::now().checked_add(self.between) {
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::Hyper(e)
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
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
