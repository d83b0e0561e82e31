//! Hostile cases: TLS at the API. A client that starts a handshake and
//! never finishes it, clients of mutual TLS without a certificate or with
//! one another CA issued, against a real `leasehold` process serving
//! HTTPS on loopback (the embedded backend).

use std::time::{Duration, Instant};

use leasehold_host::timeouts::HTTP_HEADER_READ;
use leasehold_tests::TempDir;
use leasehold_tests::http::{ClientTls, request_tls};
use leasehold_tests::pki::{Issued, Pki};
use leasehold_tests::process::{Replica, eventually, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const START: Duration = Duration::from_secs(30);

/// A host serving HTTPS with `cert`, and `extra` `[http]` keys.
fn https_host(dir: &TempDir, cert: &Issued, extra: &str) -> Replica {
    let port = free_port();
    let config = format!(
        "cluster = \"hostile\"\nholder = \"h\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\
         tls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}\n",
        cert.cert.display(),
        cert.key.display()
    );
    Replica::start(dir.path(), "tls", port, &config)
}

/// Wait until `/healthz` answers over TLS as `tls`.
async fn healthy(tls: &ClientTls, host: &Replica) {
    eventually("the host answers over TLS", START, || async {
        let (reply, _) = request_tls(tls, &host.addr, "GET", "/healthz", &[], None)
            .await
            .ok()?;
        (reply.status == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_tls_handshake_that_never_finishes_is_cut_off_at_the_header_deadline() {
    let dir = TempDir::new();
    let ca = Pki::new(dir.path(), "api");
    let host = https_host(&dir, &ca.server("api", &["127.0.0.1"]), "");
    let tls = ClientTls::trusting(&ca.ca());
    healthy(&tls, &host).await;
    let limit = HTTP_HEADER_READ + Duration::from_secs(2);
    // The first bytes of a ClientHello record, and then nothing.
    let mut stream = tokio::net::TcpStream::connect(&host.addr).await.unwrap();
    stream
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(limit, stream.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a stalled handshake still held its connection after {limit:?}"
    );
    assert!(
        started.elapsed() >= HTTP_HEADER_READ - Duration::from_millis(500),
        "closed after {:?}, before the deadline",
        started.elapsed()
    );
    // The host serves on.
    healthy(&tls, &host).await;
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_of_its_ca() {
    let dir = TempDir::new();
    let ca = Pki::new(dir.path(), "api");
    let clients = Pki::new(dir.path(), "clients");
    let other = Pki::new(dir.path(), "other");
    let host = https_host(
        &dir,
        &ca.server("api", &["127.0.0.1"]),
        &format!("tls_client_ca = \"{}\"", clients.ca().display()),
    );
    let good = clients.client("good", "operator");
    let with_cert = ClientTls::presenting(&ca.ca(), &good.cert, &good.key);
    healthy(&with_cert, &host).await;
    let (reply, _) = request_tls(&with_cert, &host.addr, "GET", "/v1/leases", &[], None)
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);

    // Without a certificate, or with one of another CA: no answer.
    let without = ClientTls::trusting(&ca.ca());
    let refused = request_tls(&without, &host.addr, "GET", "/healthz", &[], None).await;
    assert!(
        refused.is_err(),
        "answered without a client certificate: {refused:?}"
    );
    let stranger = other.client("stranger", "operator");
    let wrong = ClientTls::presenting(&ca.ca(), &stranger.cert, &stranger.key);
    let refused = request_tls(&wrong, &host.addr, "GET", "/healthz", &[], None).await;
    assert!(
        refused.is_err(),
        "answered a certificate of another CA: {refused:?}"
    );
}
