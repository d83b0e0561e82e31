//! Test support: throwaway PostgreSQL databases, and the gate that keeps
//! the deliberately unfenced test build from running as anything else.
//!
//! Each test that needs PostgreSQL creates its own database (named
//! `leasehold_test_<uuid>`), migrates it, and drops it when the guard goes
//! out of scope, so tests never depend on what an earlier run left behind.
//!
//! The feature `unsafe-disable-fence` compiles the fence check out of every
//! fenced commit (`authority::fence_check`), so the fault suite can prove
//! that its checker catches a stale leader's writes. Only one program may
//! run like that: `leasehold-unfenced`, the test-fixture package
//! `tests/fixtures/unfenced-host`, which calls
//! [`declare_unfenced_test_binary`] first thing in `main`. The `leasehold`
//! binary never does, so a `leasehold` built with the feature (`cargo build
//! -p leasehold-host --features unsafe-disable-fence`, or feature
//! unification in a `--workspace` build that selected the fixture) refuses
//! to `run` ([`refuse_undeclared_unfenced_build`]) instead of leading
//! leases without the fence.
//!
//! Must never: let an undeclared program with the fence check compiled out
//! pass [`refuse_undeclared_unfenced_build`].

use std::sync::atomic::{AtomicBool, Ordering};

use thiserror::Error;

use crate::db::{DEFAULT_URL, Database, URL_ENV};

/// Whether this build of the library has the fence check compiled out (the
/// test-only feature `unsafe-disable-fence`).
pub const FENCE_CHECK_COMPILED_OUT: bool = cfg!(feature = "unsafe-disable-fence");

/// The line the unfenced test binary prints, and logs, when it starts.
pub const UNFENCED_TEST_BUILD_WARNING: &str = "WARNING: this is leasehold-unfenced, the \
deliberately unfenced test build: the fence check is compiled out, so a stale leader's writes \
commit. It exists only for the fault suite; never deploy it.";

/// Set once by the unfenced test binary's `main`; read by
/// [`refuse_undeclared_unfenced_build`].
static DECLARED_UNFENCED_TEST_BINARY: AtomicBool = AtomicBool::new(false);

/// Declare that the running program is `leasehold-unfenced`, the fault
/// suite's test fixture, and so may run with the fence check compiled out.
///
/// Only that fixture's `main` calls this, before anything else; no other
/// program has a reason to. In a build with the fence check it changes
/// nothing.
pub fn declare_unfenced_test_binary() {
    // Release pairs with the Acquire in the gate, should it ever run on
    // another thread than the one `main` declared on.
    DECLARED_UNFENCED_TEST_BINARY.store(true, Ordering::Release);
}

/// A program with the fence check compiled out that is not the declared
/// unfenced test binary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "refusing to run: this program was built with the test-only feature \
     `unsafe-disable-fence`, which compiles the fence check out of every guest write, and it is \
     not the leasehold-unfenced test binary. Build leasehold without that feature (`cargo build \
     -p leasehold-host`), and never in one `--workspace` build with the leasehold-unfenced \
     package, whose dependency switches the feature on for every package built with it"
)]
pub struct UndeclaredUnfencedBuild;

/// Refuse, before a host leads anything, unless this build keeps the fence
/// check or the program declared itself the unfenced test binary
/// ([`declare_unfenced_test_binary`]).
pub fn refuse_undeclared_unfenced_build() -> Result<(), UndeclaredUnfencedBuild> {
    gate(
        FENCE_CHECK_COMPILED_OUT,
        DECLARED_UNFENCED_TEST_BINARY.load(Ordering::Acquire),
    )
}

/// The judgement of [`refuse_undeclared_unfenced_build`], apart from the
/// build and the process-wide declaration so every case can be tested in
/// one (fenced) test build.
fn gate(fence_check_compiled_out: bool, declared: bool) -> Result<(), UndeclaredUnfencedBuild> {
    if fence_check_compiled_out && !declared {
        Err(UndeclaredUnfencedBuild)
    } else {
        Ok(())
    }
}

/// A database that exists for the lifetime of this value.
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Create and migrate a fresh database on the server named by
    /// `LEASEHOLD_DATABASE_URL` (default: local PostgreSQL).
    pub async fn create() -> Self {
        let admin_url = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_string());
        Self::create_on(&admin_url).await
    }

    /// Create and migrate a fresh database on the server `admin_url` names
    /// (a test's own PostgreSQL cluster, say); it is dropped with this
    /// value.
    pub async fn create_on(admin_url: &str) -> Self {
        let admin_url = admin_url.to_string();
        let name = format!("leasehold_test_{}", uuid::Uuid::new_v4().simple());
        let (client, conn) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "tests need PostgreSQL at {} ({URL_ENV}): {e}",
                    crate::db::redact(&admin_url)
                )
            });
        let conn = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        drop(client);
        let _ = conn.await;
        let mut url = url::Url::parse(&admin_url).expect("admin url");
        url.set_path(&name);
        let db = Self {
            admin_url,
            name,
            url: url.to_string(),
        };
        db.database(4)
            .migrate()
            .await
            .expect("migrate test database");
        db
    }

    /// The URL of the test database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A pool on the test database.
    pub fn database(&self, max_connections: usize) -> Database {
        Database::new(&self.url, max_connections).expect("test database url")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop runs inside or outside a runtime; a dedicated thread with its
        // own runtime works in both.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&admin_url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_the_fence_check_runs_only_when_declared() {
        assert_eq!(gate(true, false), Err(UndeclaredUnfencedBuild));
        assert_eq!(gate(true, true), Ok(()));
    }

    #[test]
    fn a_build_with_the_fence_check_always_runs() {
        assert_eq!(gate(false, false), Ok(()));
        assert_eq!(gate(false, true), Ok(()));
    }

    #[test]
    fn the_refusal_says_what_to_build_instead() {
        let text = UndeclaredUnfencedBuild.to_string();
        for needed in [
            "unsafe-disable-fence",
            "leasehold-unfenced",
            "cargo build -p leasehold-host",
            "--workspace",
        ] {
            assert!(text.contains(needed), "{needed:?} missing from: {text}");
        }
    }

    /// Every other test of this library assumes the fence check is there.
    /// It is not when a `--workspace` command also selected the
    /// `leasehold-unfenced` fixture, whose dependency switches the feature
    /// on for every package in the same build: fail here, saying so,
    /// rather than let the fence tests fail one by one, or pass unfenced.
    /// This test program never declares itself the unfenced binary (no
    /// test may: the declaration is process-wide), so the real gate
    /// refuses it exactly when the fence check is compiled out.
    #[test]
    fn the_library_under_test_keeps_its_fence_check() {
        assert_eq!(
            refuse_undeclared_unfenced_build(),
            Ok(()),
            "leasehold-host was built with `unsafe-disable-fence`, asked for or switched on by \
             feature unification because this build also selected the leasehold-unfenced test \
             fixture; its tests assume the fence check. Run them without the feature, and in a \
             `--workspace` run with `--exclude leasehold-unfenced` (as `cargo xtask test` does)"
        );
    }
}
