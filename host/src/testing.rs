//! Test support: throwaway PostgreSQL databases.
//!
//! Each test that needs PostgreSQL creates its own database (named
//! `leasehold_test_<uuid>`), migrates it, and drops it when the guard goes
//! out of scope, so tests never depend on what an earlier run left behind.

use crate::db::{DEFAULT_URL, Database, URL_ENV};

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
