//! Moving a cluster between the embedded backend and PostgreSQL (either
//! way): `leasehold export` writes its objects and the highest epoch of
//! each of its leases as one JSON document, `leasehold import` writes them
//! into an empty cluster of another backend.
//!
//! What moves: every object with its value, status, labels, owner,
//! finalizers, generation and deletion mark; and each lease's highest
//! epoch, recorded as a released lease at that epoch, so the first grant
//! on the new backend is above it (a receiver that kept the highest epoch
//! it accepted goes on accepting the new leader's requests, and refusing
//! anything older). What does not: object versions (each backend numbers
//! its own commits; an import is one commit per object, attributed to the
//! API token `import`), the event log, the change stream before the
//! import, and tenure history.
//!
//! Both ends must be quiet: an export refuses while a lease of the
//! cluster is held (its epoch could still grow), an import refuses while
//! one is held or the cluster holds any object, and an import into a data
//! directory takes it exclusively (no host may run on it).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::authority::Authority;
use crate::authority::postgres::PostgresAuthority;
use crate::authority::sqlite::SqliteAuthority;
use crate::db::Database;
use crate::store::postgres::PostgresStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{ApiWrite, Metadata, ObjectKey, Store, Written};

use super::EmbeddedDb;

/// The `format` field of an export.
pub const FORMAT: &str = "leasehold-export";
/// The export format's version.
pub const VERSION: u32 = 1;
/// The API token name imported writes are attributed to.
pub const IMPORT_TOKEN: &str = "import";

/// One cluster, as `leasehold export` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Export {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The cluster.
    pub cluster: String,
    /// When it was exported (this machine's clock).
    pub exported_at: DateTime<Utc>,
    /// Where from (a PostgreSQL URL is redacted).
    pub source: String,
    /// Each lease's highest epoch, by name.
    pub leases: Vec<LeaseEpoch>,
    /// Every object, by kind and name.
    pub objects: Vec<ExportedObject>,
}

/// A lease's highest epoch and its last holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseEpoch {
    /// The lease.
    pub name: String,
    /// Its last holder.
    pub holder: String,
    /// The highest epoch granted.
    pub epoch: u64,
}

/// An object, all but its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedObject {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// The value.
    pub value: serde_json::Value,
    /// The status part, if any.
    pub status: Option<serde_json::Value>,
    /// Its generation.
    pub generation: u64,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Owner.
    pub owner: Option<Owner>,
    /// Finalizers.
    pub finalizers: Vec<String>,
    /// When its deletion was requested, if it is marked.
    pub deleting_since: Option<DateTime<Utc>>,
}

/// An object's owner in an export.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl Owner {
    fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind.clone(),
            name: self.name.clone(),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Objects written.
    pub objects: usize,
    /// Leases whose epoch was recorded.
    pub leases: usize,
}

/// Why an export or import failed.
#[derive(Debug, Error)]
pub enum TransferError {
    /// The backend could not be read or written.
    #[error("{0}")]
    Backend(String),
    /// The cluster is in use or not empty.
    #[error("{0}")]
    Refused(String),
    /// The document is not an export this host reads.
    #[error("not a Leasehold export: {0}")]
    Format(String),
}

/// One end of a transfer.
pub enum Side {
    /// The embedded backend of a data directory.
    Embedded(EmbeddedDb),
    /// PostgreSQL (migrated).
    Postgres(Box<Database>),
}

impl Side {
    /// Where, for messages (a URL redacted).
    pub fn endpoint(&self) -> String {
        match self {
            Side::Embedded(db) => db.endpoint().to_string(),
            Side::Postgres(db) => db.endpoint().to_string(),
        }
    }

    fn store(&self) -> Box<dyn Store> {
        match self {
            Side::Embedded(db) => Box::new(SqliteStore::new(db.clone())),
            Side::Postgres(db) => Box::new(PostgresStore::new((**db).clone())),
        }
    }

    fn authority(&self) -> Box<dyn Authority> {
        match self {
            Side::Embedded(db) => Box::new(SqliteAuthority::new(db.clone())),
            Side::Postgres(db) => Box::new(PostgresAuthority::new(
                (**db).clone(),
                crate::authority::ExpectedIdentity::default(),
            )),
        }
    }

    /// The kinds of `cluster`'s objects, in order.
    async fn kinds(&self, cluster: &str) -> Result<Vec<String>, TransferError> {
        const KINDS: &str = "SELECT DISTINCT kind FROM leasehold_objects WHERE cluster = ";
        match self {
            Side::Embedded(db) => {
                let cluster = cluster.to_string();
                db.read(move |c| {
                    let mut statement = c.prepare(&format!("{KINDS}?1 ORDER BY kind"))?;
                    statement
                        .query_map([cluster], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await
                .map_err(backend)?
                .map_err(|e| backend(super::describe(&e)))
            }
            Side::Postgres(db) => {
                let client = db.client().await.map_err(backend)?;
                let rows = client
                    .query(&format!("{KINDS}$1 ORDER BY kind"), &[&cluster])
                    .await
                    .map_err(|e| backend(db.unavailable(e)))?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
        }
    }

    /// Set each object's generation and deletion mark as exported (the
    /// store's writes made them generation 1, unmarked), leaving versions
    /// and the change stream as they are.
    async fn restore_marks(
        &self,
        cluster: &str,
        objects: &[ExportedObject],
    ) -> Result<(), TransferError> {
        let marks: Vec<(String, String, i64, Option<i64>)> = objects
            .iter()
            .map(|o| {
                (
                    o.kind.clone(),
                    o.name.clone(),
                    i64::try_from(o.generation).unwrap_or(i64::MAX),
                    o.deleting_since.map(super::clock::micros),
                )
            })
            .collect();
        match self {
            Side::Embedded(db) => {
                let cluster = cluster.to_string();
                db.write(move |c| {
                    let tx =
                        c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    {
                        let mut update = tx.prepare(
                            "UPDATE leasehold_objects SET generation = ?4, deleting_since = ?5
                              WHERE cluster = ?1 AND kind = ?2 AND name = ?3",
                        )?;
                        for (kind, name, generation, deleting) in &marks {
                            update.execute(rusqlite::params![
                                cluster, kind, name, generation, deleting
                            ])?;
                        }
                    }
                    tx.commit()
                })
                .await
                .map_err(backend)?
                .map_err(|e| backend(super::describe(&e)))
            }
            Side::Postgres(db) => {
                let mut client = db.client().await.map_err(backend)?;
                let failed = |e| backend(db.unavailable(e));
                let tx = client.transaction().await.map_err(failed)?;
                for (kind, name, generation, deleting) in &marks {
                    let deleting = deleting.map(super::clock::time);
                    tx.execute(
                        "UPDATE leasehold_objects SET generation = $4, deleting_since = $5
                          WHERE cluster = $1 AND kind = $2 AND name = $3",
                        &[&cluster, kind, name, generation, &deleting],
                    )
                    .await
                    .map_err(failed)?;
                }
                tx.commit().await.map_err(failed)
            }
        }
    }

    /// Record each lease at its exported epoch, released, unless the
    /// backend already has it at that epoch or above.
    async fn record_epochs(
        &self,
        cluster: &str,
        leases: &[LeaseEpoch],
    ) -> Result<(), TransferError> {
        match self {
            Side::Embedded(db) => {
                let cluster = cluster.to_string();
                let leases = leases.to_vec();
                db.write(move |c| {
                    let tx =
                        c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    let now = super::clock::Now::read();
                    {
                        let mut upsert = tx.prepare(
                            "INSERT INTO leasehold_leases
                                    (cluster, name, holder, epoch, acquired_at, renewed_at,
                                     expires_at, expires_mono, boot, released)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5, ?6, ?7, 1)
                             ON CONFLICT (cluster, name) DO UPDATE SET
                                    holder = excluded.holder, epoch = excluded.epoch,
                                    released = 1, expires_at = excluded.expires_at,
                                    expires_mono = excluded.expires_mono, boot = excluded.boot
                              WHERE excluded.epoch > leasehold_leases.epoch",
                        )?;
                        for lease in &leases {
                            upsert.execute(rusqlite::params![
                                cluster,
                                lease.name,
                                lease.holder,
                                i64::try_from(lease.epoch).unwrap_or(i64::MAX),
                                now.utc,
                                now.mono,
                                super::clock::boot_id(),
                            ])?;
                        }
                    }
                    tx.commit()
                })
                .await
                .map_err(backend)?
                .map_err(|e| backend(super::describe(&e)))
            }
            Side::Postgres(db) => {
                let mut client = db.client().await.map_err(backend)?;
                let failed = |e| backend(db.unavailable(e));
                let tx = client.transaction().await.map_err(failed)?;
                for lease in leases {
                    let epoch = i64::try_from(lease.epoch).unwrap_or(i64::MAX);
                    tx.execute(
                        "INSERT INTO leasehold_leases AS l
                                (cluster, name, holder, epoch, acquired_at, renewed_at,
                                 expires_at, released)
                         VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp(),
                                 clock_timestamp(), true)
                         ON CONFLICT (cluster, name) DO UPDATE SET
                                holder = EXCLUDED.holder, epoch = EXCLUDED.epoch,
                                released = true, expires_at = EXCLUDED.expires_at
                          WHERE EXCLUDED.epoch > l.epoch",
                        &[&cluster, &lease.name, &lease.holder, &epoch],
                    )
                    .await
                    .map_err(failed)?;
                }
                tx.commit().await.map_err(failed)
            }
        }
    }
}

fn backend(e: impl std::fmt::Display) -> TransferError {
    TransferError::Backend(e.to_string())
}

/// Refuse while a lease of `cluster` is held on `side`.
async fn refuse_live_leases(
    side: &Side,
    cluster: &str,
    doing: &str,
) -> Result<Vec<crate::authority::LeaseRecord>, TransferError> {
    let leases = side.authority().observe(cluster).await.map_err(backend)?;
    let live: Vec<String> = leases
        .iter()
        .filter(|l| l.active)
        .map(|l| format!("{} (held by {} at epoch {})", l.name, l.holder, l.epoch))
        .collect();
    if !live.is_empty() {
        return Err(TransferError::Refused(format!(
            "cannot {doing} cluster {cluster} at {}: its leases {} are held; stop every host of \
             the cluster first (their epochs could still grow)",
            side.endpoint(),
            live.join(", ")
        )));
    }
    Ok(leases)
}

/// Export `cluster` from `side`.
pub async fn export(side: &Side, cluster: &str) -> Result<Export, TransferError> {
    crate::names::check_label("cluster", cluster).map_err(backend)?;
    let leases = refuse_live_leases(side, cluster, "export").await?;
    let store = side.store();
    let mut objects = Vec::new();
    for kind in side.kinds(cluster).await? {
        let mut after: Option<String> = None;
        loop {
            let page = store
                .list(
                    cluster,
                    &kind,
                    after.as_deref(),
                    crate::limits::MAX_PAGE_SIZE,
                )
                .await
                .map_err(backend)?;
            for object in page.objects {
                let json = |text: &str| {
                    serde_json::from_str(text).map_err(|e| {
                        TransferError::Backend(format!(
                            "{}/{} holds text that is not JSON ({e}); the store is damaged",
                            object.kind, object.name
                        ))
                    })
                };
                objects.push(ExportedObject {
                    value: json(&object.value)?,
                    status: object.status.as_deref().map(json).transpose()?,
                    generation: object.generation,
                    labels: object.meta.labels.clone(),
                    owner: object.meta.owner.as_ref().map(|o| Owner {
                        kind: o.kind.clone(),
                        name: o.name.clone(),
                    }),
                    finalizers: object.meta.finalizers.clone(),
                    deleting_since: object.deleting_since,
                    kind: object.kind,
                    name: object.name,
                });
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(Export {
        format: FORMAT.to_string(),
        version: VERSION,
        cluster: cluster.to_string(),
        exported_at: Utc::now(),
        source: side.endpoint(),
        leases: leases
            .into_iter()
            .map(|l| LeaseEpoch {
                name: l.name,
                holder: l.holder,
                epoch: l.epoch.0,
            })
            .collect(),
        objects,
    })
}

/// Import `export` into `side` (into its cluster, or `cluster` if given).
pub async fn import(
    side: &Side,
    export: &Export,
    cluster: Option<&str>,
) -> Result<Imported, TransferError> {
    if export.format != FORMAT {
        return Err(TransferError::Format(format!(
            "its format is {:?}, not {FORMAT:?}",
            export.format
        )));
    }
    if export.version != VERSION {
        return Err(TransferError::Format(format!(
            "it is version {} of the format; this host reads version {VERSION}",
            export.version
        )));
    }
    let cluster = cluster.unwrap_or(&export.cluster);
    crate::names::check_label("cluster", cluster).map_err(backend)?;
    refuse_live_leases(side, cluster, "import into").await?;
    if !side.kinds(cluster).await?.is_empty() {
        return Err(TransferError::Refused(format!(
            "cluster {cluster} at {} already holds objects; import into an empty cluster",
            side.endpoint()
        )));
    }
    let store = side.store();
    // Owners before what they own: a write naming an owner needs it to
    // exist (unmarked: marks are restored at the end).
    let mut written: BTreeSet<ObjectKey> = BTreeSet::new();
    let mut left: Vec<&ExportedObject> = export.objects.iter().collect();
    while !left.is_empty() {
        let (ready, waiting): (Vec<&ExportedObject>, Vec<&ExportedObject>) =
            left.into_iter().partition(|o| {
                o.owner
                    .as_ref()
                    .is_none_or(|owner| written.contains(&owner.key()))
            });
        if ready.is_empty() {
            let names: Vec<String> = waiting
                .iter()
                .map(|o| format!("{}/{}", o.kind, o.name))
                .collect();
            return Err(TransferError::Format(format!(
                "the owners of {} are not in the export (or own each other)",
                names.join(", ")
            )));
        }
        for object in ready {
            let key = ObjectKey {
                kind: object.kind.clone(),
                name: object.name.clone(),
            };
            let put = ApiWrite::Put {
                key: key.clone(),
                value: object.value.to_string(),
                meta: Some(Metadata {
                    labels: object.labels.clone(),
                    owner: object.owner.as_ref().map(Owner::key),
                    finalizers: object.finalizers.clone(),
                }),
                expected_version: Some(0),
            };
            let wrote = crate::store::with_api_token(
                Some(IMPORT_TOKEN.to_string()),
                store.write(cluster, &put),
            )
            .await
            .map_err(|e| backend(format!("importing {key}: {e}")))?;
            if !matches!(wrote, Written::Created(_)) {
                return Err(TransferError::Backend(format!(
                    "importing {key}: the store did not create it ({wrote:?})"
                )));
            }
            if let Some(status) = &object.status {
                let write = ApiWrite::Status {
                    key: key.clone(),
                    status: Some(status.to_string()),
                    expected_generation: None,
                };
                crate::store::with_api_token(
                    Some(IMPORT_TOKEN.to_string()),
                    store.write(cluster, &write),
                )
                .await
                .map_err(|e| backend(format!("importing the status of {key}: {e}")))?;
            }
            written.insert(key);
        }
        left = waiting;
    }
    side.restore_marks(cluster, &export.objects).await?;
    side.record_epochs(cluster, &export.leases).await?;
    Ok(Imported {
        objects: export.objects.len(),
        leases: export.leases.len(),
    })
}

/// Where `leasehold export` reads or `leasehold import` writes.
#[derive(Debug, Clone, clap::Args)]
pub struct Place {
    /// The config whose backend to use: its data_dir (embedded) or its
    /// [database] url (PostgreSQL), and its cluster.
    #[arg(long, short, value_name = "FILE", conflicts_with_all = ["data_dir", "database_url"])]
    pub config: Option<std::path::PathBuf>,
    /// An embedded backend's data directory.
    #[arg(long, value_name = "DIR", conflicts_with = "database_url")]
    pub data_dir: Option<std::path::PathBuf>,
    /// A PostgreSQL URL (migrated first when importing).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// The cluster (required without --config; overrides the config's).
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
}

/// `leasehold export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub from: Place,
    /// Write the export here instead of to standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

/// `leasehold import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// Where the cluster goes (an empty cluster).
    #[command(flatten)]
    pub to: Place,
    /// Read the export from here instead of from standard input.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<std::path::PathBuf>,
}

/// Open the side `place` names, with the cluster it names.
async fn open(place: &Place, access: super::Access) -> anyhow::Result<(Side, Option<String>)> {
    use anyhow::{Context, bail};
    let postgres = |url: &str| -> anyhow::Result<Side> {
        // Unnamed statements: through any pooler, as `migrate` does.
        let db = Database::new(url, 2)?.with_pooler(crate::db::Pooler::Transaction);
        Ok(Side::Postgres(Box::new(db)))
    };
    let (side, cluster) = match (&place.config, &place.data_dir, &place.database_url) {
        (Some(path), _, _) => {
            let config = crate::config::Config::load(path)?;
            let side = match config.database.backend() {
                crate::config::Backend::Embedded => {
                    Side::Embedded(EmbeddedDb::open(&config.data_dir, access).await?)
                }
                crate::config::Backend::Postgres(url) => postgres(url)?,
                crate::config::Backend::Memory => bail!(
                    "{} uses the in-memory backend: nothing outlives its process, so there is \
                     nothing to move",
                    path.display()
                ),
            };
            (side, Some(config.cluster))
        }
        (None, Some(dir), _) => (Side::Embedded(EmbeddedDb::open(dir, access).await?), None),
        (None, None, Some(url)) => (postgres(url)?, None),
        (None, None, None) => {
            bail!("where? give --config FILE, --data-dir DIR or --database-url URL")
        }
    };
    if let Side::Postgres(db) = &side {
        db.migrate()
            .await
            .with_context(|| format!("preparing {}", db.endpoint()))?;
    }
    Ok((side, place.cluster.clone().or(cluster)))
}

/// `leasehold export`: the document on standard output (or `--output`),
/// a summary on standard error.
pub async fn export_command(args: ExportArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let (side, cluster) = open(&args.from, super::Access::Shared).await?;
    let cluster = cluster.context("which cluster? give --cluster NAME, or --config FILE")?;
    let export = export(&side, &cluster).await?;
    let text = serde_json::to_string_pretty(&export)?;
    match &args.output {
        Some(path) => std::fs::write(path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?,
        None => println!("{text}"),
    }
    eprintln!(
        "exported cluster {cluster} from {}: {} objects, {} leases (highest epochs {})",
        side.endpoint(),
        export.objects.len(),
        export.leases.len(),
        export
            .leases
            .iter()
            .map(|l| format!("{}={}", l.name, l.epoch))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// `leasehold import`: reads the document from standard input (or
/// `--input`).
pub async fn import_command(args: ImportArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Read as _;
    let text = match &args.input {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the export from standard input")?;
            text
        }
    };
    let export: Export =
        serde_json::from_str(&text).map_err(|e| TransferError::Format(format!("{e}")))?;
    let (side, cluster) = open(&args.to, super::Access::Exclusive).await?;
    let cluster = args.to.cluster.clone().or(cluster);
    let imported = import(&side, &export, cluster.as_deref()).await?;
    eprintln!(
        "imported cluster {} into {}: {} objects; {} leases continue above their exported epochs",
        cluster.as_deref().unwrap_or(&export.cluster),
        side.endpoint(),
        imported.objects,
        imported.leases
    );
    Ok(())
}
