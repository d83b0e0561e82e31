//! A certificate authority of a test's own, made with the `openssl`
//! command every machine that runs the suite has: a CA certificate, and
//! server and client certificates it signs, as PEM files in a folder.
//! Keys are P-256, written as PKCS#8 (`BEGIN PRIVATE KEY`), readable by
//! their owner only.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One CA and the folder its files go to.
pub struct Pki {
    dir: PathBuf,
    name: String,
}

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl Pki {
    /// A new CA named `name`, its files in `dir` (`<name>-ca.pem`,
    /// `<name>-ca.key`).
    pub fn new(dir: &Path, name: &str) -> Self {
        let pki = Self {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            path_str(&pki.ca_key()),
            "-out",
            path_str(&pki.ca()),
            "-days",
            "3",
            "-subj",
            &format!("/CN=Leasehold test CA {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        pki
    }

    /// The CA's certificate (PEM): what a client or server trusts.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    fn ca_key(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.key", self.name))
    }

    /// A server certificate for `names` (DNS names, or IP addresses),
    /// as `<file>.pem` and `<file>.key`.
    pub fn server(&self, file: &str, names: &[&str]) -> Issued {
        let alt: Vec<String> = names
            .iter()
            .map(|n| {
                if n.parse::<std::net::IpAddr>().is_ok() {
                    format!("IP:{n}")
                } else {
                    format!("DNS:{n}")
                }
            })
            .collect();
        self.issue(
            file,
            names.first().copied().unwrap_or("server"),
            &format!(
                "subjectAltName={}\nextendedKeyUsage=serverAuth\n",
                alt.join(",")
            ),
        )
    }

    /// A client certificate whose common name is `cn` (PostgreSQL's
    /// `cert` authentication takes it as the user name).
    pub fn client(&self, file: &str, cn: &str) -> Issued {
        self.issue(file, cn, "extendedKeyUsage=clientAuth\n")
    }

    fn issue(&self, file: &str, cn: &str, extensions: &str) -> Issued {
        let issued = Issued {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        let request = self.dir.join(format!("{file}.csr"));
        let ext = self.dir.join(format!("{file}.ext"));
        std::fs::write(
            &ext,
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"),
        )
        .expect("write the extensions file");
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            path_str(&issued.key),
            "-out",
            path_str(&request),
            "-subj",
            &format!("/CN={cn}"),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            path_str(&request),
            "-CA",
            path_str(&self.ca()),
            "-CAkey",
            path_str(&self.ca_key()),
            "-CAcreateserial",
            "-out",
            path_str(&issued.cert),
            "-days",
            "2",
            "-extfile",
            path_str(&ext),
        ]);
        owner_only(&issued.key);
        issued
    }
}

/// Make `path` readable and writable by its owner only (0600).
pub fn owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", path.display()));
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("openssl not runnable ({e}): the TLS tests need it"));
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}
