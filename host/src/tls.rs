//! TLS material and rustls configurations: PEM files read into
//! certificates and keys, the client configurations the host connects with
//! (PostgreSQL, guests' outbound HTTPS) and the API's server configuration,
//! rebuilt on SIGHUP.
//!
//! Owns: reading and checking PEM files (a missing file, a file without a
//! certificate, a key that does not match its certificate are refusals
//! naming the file), the one crypto provider (ring), the verifiers the
//! libpq modes need, and the words a certificate failure is told in
//! ([`certificate_problem`]). Must never: log or return a private key's
//! bytes; accept a certificate a configured mode says must verify.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use thiserror::Error;

/// A TLS file that cannot be used, named by the config key that gave it.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{key} {path}: {reason}")]
pub struct TlsFileError {
    /// The config key or URL parameter that named the file
    /// (`http.tls_cert`, `sslrootcert`, ...).
    pub key: String,
    /// The file as given.
    pub path: String,
    /// What is wrong with it (never its content).
    pub reason: String,
}

impl TlsFileError {
    fn new(key: &str, path: &Path, reason: impl Into<String>) -> Self {
        Self {
            key: key.to_string(),
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}

/// The crypto provider of every TLS configuration the host builds.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: std::sync::OnceLock<Arc<CryptoProvider>> = std::sync::OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Every certificate of a PEM file, in file order; refused when the file
/// cannot be read or holds none.
pub fn read_certificates(
    key: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let bytes = std::fs::read(path).map_err(|e| TlsFileError::new(key, path, e.to_string()))?;
    let mut certificates = Vec::new();
    for item in CertificateDer::pem_slice_iter(&bytes) {
        let certificate = item.map_err(|e| {
            TlsFileError::new(key, path, format!("not a PEM certificate file ({e})"))
        })?;
        certificates.push(certificate);
    }
    if certificates.is_empty() {
        return Err(TlsFileError::new(
            key,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn read_private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    let bytes = std::fs::read(path).map_err(|e| TlsFileError::new(key, path, e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        TlsFileError::new(
            key,
            path,
            match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "holds no PEM private key (PKCS#8, RSA or EC)".to_string()
                }
                other => format!("not a PEM private key file ({other})"),
            },
        )
    })
}

/// A root store of every certificate in `path`.
pub fn read_roots(key: &str, path: &Path) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(key, path)? {
        roots.add(certificate).map_err(|e| {
            TlsFileError::new(key, path, format!("not a usable CA certificate ({e})"))
        })?;
    }
    Ok(roots)
}

/// The platform's trusted roots (the system's certificate bundle), for
/// `sslrootcert=system`.
pub fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no certificate found".to_string());
        return Err(format!(
            "the platform's trusted roots could not be loaded: {why}"
        ));
    }
    Ok(roots)
}

/// The public roots guests' outbound HTTPS trusts by default (Mozilla's
/// list, compiled in: the same on every machine).
pub fn public_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// Whether a key file can be read by its group or by others (a secret
/// that should be `0600`). `None` when its mode cannot be read.
pub fn readable_by_others(path: &Path) -> Option<bool> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    Some(mode & 0o077 != 0)
}

/// How far a client checks the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Chain to a trusted root, unexpired, and issued for the name
    /// connected to (libpq's `verify-full`).
    Full,
    /// Chain to a trusted root and unexpired, whatever name it was issued
    /// for (`verify-ca`).
    Chain,
    /// Encryption only: any certificate (`require`/`prefer` without a root
    /// file), the handshake's signatures still checked.
    Nothing,
}

/// A client configuration trusting `roots`, checking as `verify` says and
/// presenting `identity` (certificate chain and key) when given.
pub fn client_config(
    roots: RootCertStore,
    verify: Verify,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match verify {
        Verify::Full => builder.with_root_certificates(roots),
        Verify::Chain | Verify::Nothing => {
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build();
            let verifier = match (verify, webpki) {
                (Verify::Chain, Ok(webpki)) => Checked::Chain(webpki),
                (Verify::Chain, Err(e)) => return Err(format!("no usable root certificate: {e}")),
                // Nothing to verify against is fine when nothing is verified.
                _ => Checked::Nothing(provider.clone()),
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
    };
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the client certificate and key do not go together: {e}")),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The verifiers below full verification.
#[derive(Debug)]
enum Checked {
    /// The chain and dates, not the name.
    Chain(Arc<rustls::client::WebPkiServerVerifier>),
    /// Nothing but the handshake's signatures.
    Nothing(Arc<CryptoProvider>),
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self {
            Checked::Chain(webpki) => match webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            },
            Checked::Nothing(_) => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Checked::Chain(webpki) => webpki.verify_tls12_signature(message, cert, dss),
            Checked::Nothing(provider) => rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &provider.signature_verification_algorithms,
            ),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Checked::Chain(webpki) => webpki.verify_tls13_signature(message, cert, dss),
            Checked::Nothing(provider) => rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &provider.signature_verification_algorithms,
            ),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match self {
            Checked::Chain(webpki) => webpki.supported_verify_schemes(),
            Checked::Nothing(provider) => provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }
}

/// A certificate failure found anywhere in `error`'s chain, in words a
/// person acts on: `unknown issuer`, `issued for another name`,
/// `expired`, ... `None` when the failure is not about a certificate.
pub fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(rustls::Error::InvalidCertificate(problem)) =
            error.downcast_ref::<rustls::Error>()
        {
            return Some(describe_certificate_error(problem));
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && let Some(rustls::Error::InvalidCertificate(problem)) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(describe_certificate_error(problem));
        }
        next = error.source();
    }
    None
}

/// One certificate error in words.
pub fn describe_certificate_error(problem: &CertificateError) -> String {
    match problem {
        CertificateError::UnknownIssuer => {
            "unknown issuer: the certificate does not chain to a trusted root (sslrootcert / \
             the CA file names another CA)"
                .to_string()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "name mismatch: the certificate was issued for another host name".to_string()
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "expired: the certificate is past its validity".to_string()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "not valid yet: the certificate's validity has not started".to_string()
        }
        CertificateError::Revoked => "revoked".to_string(),
        CertificateError::BadSignature => "bad signature".to_string(),
        CertificateError::BadEncoding => "malformed certificate".to_string(),
        other => format!("{other:?}"),
    }
}

/// The paths a TLS configuration was read from, kept to read again on
/// SIGHUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// `[http] tls_cert`: the certificate chain, leaf first.
    pub cert: PathBuf,
    /// `[http] tls_key`: its private key.
    pub key: PathBuf,
    /// `[http] tls_client_ca`: when set, clients must present a
    /// certificate issued by one of these CAs.
    pub client_ca: Option<PathBuf>,
}

/// The API's server configuration from its files: the certificate chain
/// and its key (checked to match), and the client CA when mutual TLS is on.
/// HTTP/1.1 only, as the API serves.
pub fn server_config(files: &ServerFiles) -> Result<rustls::ServerConfig, TlsFileError> {
    let chain = read_certificates("http.tls_cert", &files.cert)?;
    let key = read_private_key("http.tls_key", &files.key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileError::new("http.tls_cert", &files.cert, e.to_string()))?;
    let builder = match &files.client_ca {
        Some(path) => {
            let roots = read_roots("http.tls_client_ca", path)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| TlsFileError::new("http.tls_client_ca", path, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsFileError::new(
            "http.tls_key",
            &files.key,
            format!("does not match the certificate in http.tls_cert ({e})"),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The API's TLS: the server configuration made from [`ServerFiles`], made
/// again from them on SIGHUP. Connections accepted after a reload get the
/// new certificate; open ones keep the one they started with.
pub struct ServerTls {
    files: ServerFiles,
    config: std::sync::RwLock<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Read the files now.
    pub fn load(files: ServerFiles) -> Result<Self, TlsFileError> {
        let config = server_config(&files)?;
        Ok(Self {
            files,
            config: std::sync::RwLock::new(Arc::new(config)),
        })
    }

    /// Read the files again; on any problem the configuration in use stays
    /// and the problem is returned.
    pub fn reload(&self) -> Result<(), TlsFileError> {
        let config = server_config(&self.files)?;
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(config);
        Ok(())
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// An acceptor with the configuration in force now.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(
            self.config
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}
