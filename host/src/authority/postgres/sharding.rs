//! The recorded sharding of controllers on PostgreSQL (migration 21;
//! [`crate::authority::sharding`]).
//!
//! An acquire judges its rule inside its own transaction, before it locks
//! the lease row: with a plain read while the lease looks held (a standby's
//! poll writes nothing), under `FOR SHARE` of the record's row when it may
//! grant, so the record cannot change between the judgement and the
//! grant's commit. A controller without a record gets the acquiring host's
//! (`ON CONFLICT DO NOTHING`: a concurrent first record waits for the
//! other, then is judged against it), with one row per lease it runs,
//! whose primary key gives each lease one controller. `reshard` locks the
//! record's row `FOR UPDATE` first and only then looks at the leases, so
//! a grant either committed before it looked (and it refuses) or judges
//! the new record.

use tokio_postgres::Row;

use super::errors::Failure;
use super::{BOUND_GRANT_TRANSACTION, IDENTITY, PostgresAuthority};
use crate::authority::sharding::{self, RecordedSharding, ShardingRule};
use crate::authority::{AuthorityError, validate_key};
use crate::fence::{Epoch, LeaseKey};
use crate::names::check_label;

/// A controller's record.
const RECORD: &str = "
    SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
      FROM leasehold_shardings WHERE cluster = $1 AND controller = $2";

/// [`RECORD`], holding the row until the transaction ends (a grant).
const RECORD_SHARED: &str = "
    SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
      FROM leasehold_shardings WHERE cluster = $1 AND controller = $2
       FOR SHARE";

/// [`RECORD`], locked against every grant's judgement (a change of it).
const RECORD_LOCKED: &str = "
    SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
      FROM leasehold_shardings WHERE cluster = $1 AND controller = $2
       FOR UPDATE";

/// Every record of a cluster.
const RECORDS: &str = "
    SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
      FROM leasehold_shardings WHERE cluster = $1 ORDER BY controller";

/// Record a controller's rule ($2–$6) and its leases ($7, with their
/// shards $8), unless the controller has a record: answers whether the
/// rule was recorded and how many of its leases were (fewer than given:
/// another controller's record runs one).
const INSERT: &str = "
    WITH rule AS (
        INSERT INTO leasehold_shardings
               (cluster, controller, shards, shard_label, every_shard, recorded_by)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (cluster, controller) DO NOTHING
        RETURNING cluster, controller
    ), leases AS (
        INSERT INTO leasehold_sharded_leases (cluster, lease, controller, shard)
        SELECT r.cluster, l.lease, r.controller, l.shard
          FROM rule r, unnest($7::text[], $8::int4[]) AS l(lease, shard)
        ON CONFLICT (cluster, lease) DO NOTHING
        RETURNING lease
    )
    SELECT (SELECT count(*) FROM rule), (SELECT count(*) FROM leases)";

/// Change a locked record to $3–$6 and run its leases anew ($7, $8):
/// answers how many of them were recorded (fewer: a collision).
const UPDATE: &str = "
    WITH rule AS (
        UPDATE leasehold_shardings
           SET shards = $3, shard_label = $4, every_shard = $5, recorded_by = $6,
               recorded_at = clock_timestamp()
         WHERE cluster = $1 AND controller = $2
        RETURNING cluster, controller
    ), gone AS (
        DELETE FROM leasehold_sharded_leases WHERE cluster = $1 AND controller = $2
    )
    SELECT 1 FROM rule";

/// The leases $2 of controller $3 runs, after [`UPDATE`] cleared the old.
const INSERT_LEASES: &str = "
    INSERT INTO leasehold_sharded_leases (cluster, lease, controller, shard)
    SELECT $1, l.lease, $3, l.shard FROM unnest($2::text[], $4::int4[]) AS l(lease, shard)
    ON CONFLICT (cluster, lease) DO NOTHING";

/// Forget a record (its leases go with it).
const FORGET: &str = "DELETE FROM leasehold_shardings WHERE cluster = $1 AND controller = $2";

/// The first of the leases $2 that another controller than $3 runs, with
/// that controller's record.
const COLLISION: &str = "
    SELECT l.lease, s.controller, s.shards, s.shard_label, s.every_shard, s.recorded_by,
           s.recorded_at
      FROM leasehold_sharded_leases l
      JOIN leasehold_shardings s ON s.cluster = l.cluster AND s.controller = l.controller
     WHERE l.cluster = $1 AND l.lease = ANY($2) AND l.controller <> $3
     ORDER BY l.lease
     LIMIT 1";

/// The first of the leases $2 held now (not released, not expired).
const HELD: &str = "
    SELECT name, holder, epoch FROM leasehold_leases
     WHERE cluster = $1 AND name = ANY($2) AND NOT released AND expires_at > clock_timestamp()
     ORDER BY name
     LIMIT 1";

/// A record from a row of [`RECORD`] (from column `at`).
fn recorded(row: &Row, at: usize) -> RecordedSharding {
    RecordedSharding {
        rule: ShardingRule::new(
            row.get::<_, String>(at),
            row.get::<_, Option<i32>>(at + 1)
                .and_then(|n| u32::try_from(n).ok()),
            row.get::<_, Option<String>>(at + 2),
            row.get::<_, Vec<String>>(at + 3),
        ),
        recorded_by: row.get(at + 4),
        recorded_at: row.get(at + 5),
    }
}

/// The parameters a rule is written with: shards, label, kinds, and its
/// leases with their shards.
struct Written {
    shards: Option<i32>,
    leases: Vec<String>,
    indexes: Vec<Option<i32>>,
}

impl Written {
    fn of(rule: &ShardingRule) -> Self {
        let (leases, indexes) = rule
            .leases()
            .into_iter()
            .map(|(lease, shard)| (lease, shard.map(|i| i as i32)))
            .unzip();
        Self {
            shards: rule.shards.map(|n| n as i32),
            leases,
            indexes,
        }
    }
}

/// Judge `rule` for the lease `key` (at `epoch`) inside the acquire's
/// transaction `tx`, recording it first when its controller has no record;
/// `grantable`: the acquire may grant, so the record's row is held until
/// the transaction ends. Any `Err` leaves `tx` to be rolled back.
pub(super) async fn judge_or_record(
    authority: &PostgresAuthority,
    tx: &deadpool_postgres::Transaction<'_>,
    key: &LeaseKey,
    epoch: Option<Epoch>,
    rule: &ShardingRule,
    holder: &str,
    grantable: bool,
) -> Result<(), Failure> {
    rule.validate(&key.cluster)?;
    let db = &authority.shared.db;
    let read = db
        .prepare(tx, if grantable { RECORD_SHARED } else { RECORD })
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key.cluster, &rule.controller];
    let mut found = read.query_opt(tx.client(), &params).await?;
    if found.is_none() {
        let written = Written::of(rule);
        let insert = db.prepare(tx, INSERT).await?;
        let by = sharding::by_holder(holder);
        let counts = insert
            .query_one(
                tx.client(),
                &[
                    &key.cluster,
                    &rule.controller,
                    &written.shards,
                    &rule.label,
                    &rule.every_shard,
                    &by,
                    &written.leases,
                    &written.indexes,
                ],
            )
            .await?;
        let (rules, leases): (i64, i64) = (counts.get(0), counts.get(1));
        if rules == 1 {
            if leases as usize == written.leases.len() {
                return Ok(());
            }
            let collision = db.prepare(tx, COLLISION).await?;
            let row = collision
                .query_one(
                    tx.client(),
                    &[&key.cluster, &written.leases, &rule.controller],
                )
                .await?;
            let lease: String = row.get(0);
            return Err(sharding::collision(key, epoch, rule, &lease, recorded(&row, 1)).into());
        }
        // Another host recorded it first (its insert committed while this
        // one waited): judge against that.
        let shared = db.prepare(tx, RECORD_SHARED).await?;
        found = shared.query_opt(tx.client(), &params).await?;
    }
    match found {
        Some(row) => Ok(sharding::judge(key, epoch, rule, &recorded(&row, 0))?),
        None => Err(AuthorityError::Unavailable {
            endpoint: authority.endpoint().to_string(),
            reason: format!(
                "judging the sharding of {key}: the record of controller {} changed while it \
                 was read; ask again",
                rule.controller
            ),
        }
        .into()),
    }
}

impl PostgresAuthority {
    /// [`crate::authority::Authority::shardings`].
    pub(super) async fn recorded_shardings(
        &self,
        cluster: &str,
    ) -> Result<Vec<RecordedSharding>, AuthorityError> {
        check_label("cluster", cluster)?;
        self.run("reading the recorded sharding", async {
            let client = self.shared.db.pool().get().await?;
            let statement = self.shared.db.prepare(&client, RECORDS).await?;
            let rows = statement.query(&client, &[&cluster]).await?;
            Ok(rows.iter().map(|row| recorded(row, 0)).collect())
        })
        .await
    }

    /// [`crate::authority::Authority::reshard`], in one transaction that
    /// locks the record's row before it looks at the leases.
    pub(super) async fn change_sharding(
        &self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        sharding::validate_reshard(cluster, controller, next)?;
        validate_key(&LeaseKey::new(cluster, controller))?;
        self.verify().await?;
        let what = format!("changing the sharding of controller {controller}");
        self.run(&what, async {
            let db = &self.shared.db;
            let mut client = db.pool().get().await?;
            let tx = client.transaction().await?;
            tx.batch_execute(&BOUND_GRANT_TRANSACTION).await?;
            let identity = db.prepare(&tx, IDENTITY).await?;
            let identity = identity.query_opt(tx.client(), &[]).await?;
            self.admit_in_transaction(identity.as_ref())?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&cluster, &controller];
            let locked = db.prepare(&tx, RECORD_LOCKED).await?;
            let mut before = locked.query_opt(tx.client(), &params).await?;
            if before.is_none()
                && let Some(next) = next
            {
                // Nothing recorded: record `next` now (a first grant
                // racing this one waits for it, or it for that grant), then
                // look at the leases as below.
                let written = Written::of(next);
                let insert = db.prepare(&tx, INSERT).await?;
                let counts = insert
                    .query_one(
                        tx.client(),
                        &[
                            &cluster,
                            &controller,
                            &written.shards,
                            &next.label,
                            &next.every_shard,
                            &by,
                            &written.leases,
                            &written.indexes,
                        ],
                    )
                    .await?;
                let (rules, leases): (i64, i64) = (counts.get(0), counts.get(1));
                if rules == 0 {
                    // A grant recorded it meanwhile: change that record.
                    before = locked.query_opt(tx.client(), &params).await?;
                } else {
                    if (leases as usize) < written.leases.len() {
                        return Err(collision(db, &tx, cluster, next, &written).await?);
                    }
                    if let Some(refusal) =
                        held(db, &tx, cluster, controller, None, Some(next)).await?
                    {
                        return Err(refusal.into());
                    }
                    tx.commit().await?;
                    return Ok(None);
                }
            }
            let Some(before) = before.map(|row| recorded(&row, 0)) else {
                // Nothing recorded, nothing to forget.
                return Ok(None);
            };
            if let Some(next) = next {
                let written = Written::of(next);
                let taken = db
                    .prepare(&tx, COLLISION)
                    .await?
                    .query_opt(tx.client(), &[&cluster, &written.leases, &controller])
                    .await?;
                if let Some(row) = taken {
                    let lease: String = row.get(0);
                    let key = LeaseKey::new(cluster, &lease);
                    return Err(
                        sharding::collision(&key, None, next, &lease, recorded(&row, 1)).into(),
                    );
                }
            }
            if let Some(refusal) = held(db, &tx, cluster, controller, Some(&before), next).await? {
                return Err(refusal.into());
            }
            match next {
                None => {
                    db.prepare(&tx, FORGET)
                        .await?
                        .execute(tx.client(), &params)
                        .await?;
                }
                Some(next) => {
                    let written = Written::of(next);
                    db.prepare(&tx, UPDATE)
                        .await?
                        .query_opt(
                            tx.client(),
                            &[
                                &cluster,
                                &controller,
                                &written.shards,
                                &next.label,
                                &next.every_shard,
                                &by,
                            ],
                        )
                        .await?;
                    let recorded_leases = db
                        .prepare(&tx, INSERT_LEASES)
                        .await?
                        .execute(
                            tx.client(),
                            &[&cluster, &written.leases, &controller, &written.indexes],
                        )
                        .await?;
                    if (recorded_leases as usize) < written.leases.len() {
                        return Err(collision(db, &tx, cluster, next, &written).await?);
                    }
                }
            }
            tx.commit().await?;
            Ok(Some(before))
        })
        .await
    }
}

/// The refusal of `next` because another controller's record runs one of
/// its leases.
async fn collision(
    db: &crate::db::Database,
    tx: &deadpool_postgres::Transaction<'_>,
    cluster: &str,
    next: &ShardingRule,
    written: &Written,
) -> Result<Failure, Failure> {
    let row = db
        .prepare(tx, COLLISION)
        .await?
        .query_one(tx.client(), &[&cluster, &written.leases, &next.controller])
        .await?;
    let lease: String = row.get(0);
    let key = LeaseKey::new(cluster, &lease);
    Ok(sharding::collision(&key, None, next, &lease, recorded(&row, 1)).into())
}

/// The refusal to change `controller`'s record while one of its leases
/// (under `before` or `next`) is held, if one is.
async fn held(
    db: &crate::db::Database,
    tx: &deadpool_postgres::Transaction<'_>,
    cluster: &str,
    controller: &str,
    before: Option<&RecordedSharding>,
    next: Option<&ShardingRule>,
) -> Result<Option<AuthorityError>, Failure> {
    let leases = sharding::leases_concerned(controller, before.map(|r| &r.rule), next);
    let row = db
        .prepare(tx, HELD)
        .await?
        .query_opt(tx.client(), &[&cluster, &leases])
        .await?;
    Ok(row.map(|row| {
        let name: String = row.get(0);
        sharding::held(
            &LeaseKey::new(cluster, &name),
            Epoch(u64::try_from(row.get::<_, i64>(2)).unwrap_or_default()),
            controller,
            &row.get::<_, String>(1),
            before.cloned(),
        )
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;
    use tokio_postgres::NoTls;

    use super::PostgresAuthority;
    use crate::authority::conformance::{PROMPT, request};
    use crate::authority::{
        Acquired, Authority, AuthorityError, CrashDetection, EndReason, ExpectedIdentity,
        ShardingConflict, ShardingRule,
    };
    use crate::db::Database;
    use crate::testing::TestDatabase;

    /// An authority whose sessions carry `application_name`, so the test
    /// can see them wait.
    fn named(test: &TestDatabase, application: &str) -> PostgresAuthority {
        let mut url = url::Url::parse(test.url()).unwrap();
        url.query_pairs_mut()
            .append_pair("application_name", application);
        PostgresAuthority::new(
            Database::new(url.as_str(), 2).unwrap(),
            ExpectedIdentity::default(),
        )
    }

    async fn client(test: &TestDatabase) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// Return once a session of `application` waits for a lock (the
    /// record's row), failing after [`PROMPT`].
    async fn waits_for_a_lock(watcher: &tokio_postgres::Client, application: &str) {
        let deadline = Instant::now() + PROMPT;
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    &[&application],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{application} did not wait for the record's lock within {PROMPT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn shards(count: u32) -> ShardingRule {
        ShardingRule::new("x", Some(count), None, Vec::new())
    }

    /// Record `x` as 2 shards by a grant of `x-0`, then release it.
    async fn recorded_as_two(authority: &PostgresAuthority) {
        let request = request("east", "x-0", "host-a");
        let granted = authority
            .acquire_sharded(&request, CrashDetection::Ttl, None, Some(&shards(2)))
            .await;
        let Ok(Acquired::Granted(grant)) = granted else {
            panic!("expected a grant, got {granted:?}")
        };
        authority
            .release(&grant.fence, EndReason::Released)
            .await
            .unwrap();
    }

    /// A grant judged while a change of the record is in flight waits for
    /// it, then is judged by the new record: no grant under the old rule
    /// lands after the new one was recorded.
    #[tokio::test]
    async fn a_grant_waits_for_a_change_of_the_record_and_is_judged_by_the_new_one() {
        let test = TestDatabase::create().await;
        let acquirer = named(&test, "sharding-acquirer");
        recorded_as_two(&acquirer).await;
        let watcher = client(&test).await;
        let mut changer = client(&test).await;
        // A change of the record, as `reshard` makes it: the row locked
        // first, then rewritten; not committed yet.
        let change = changer.transaction().await.unwrap();
        change
            .batch_execute(
                "SELECT 1 FROM leasehold_shardings
                  WHERE cluster = 'east' AND controller = 'x' FOR UPDATE;
                 UPDATE leasehold_shardings SET shards = 3
                  WHERE cluster = 'east' AND controller = 'x'",
            )
            .await
            .unwrap();
        let (old_request, old_rule) = (request("east", "x-1", "host-a"), shards(2));
        let (acquired, ()) = tokio::join!(
            acquirer.acquire_sharded(&old_request, CrashDetection::Ttl, None, Some(&old_rule)),
            async move {
                waits_for_a_lock(&watcher, "sharding-acquirer").await;
                change.commit().await.unwrap();
            }
        );
        match acquired {
            Err(AuthorityError::Sharding(refusal)) => match &refusal.conflict {
                ShardingConflict::Differs { recorded, .. } => {
                    assert_eq!(recorded.rule, shards(3), "{refusal}")
                }
                other => panic!("expected Differs, got {other:?}"),
            },
            other => panic!("expected the old rule refused, got {other:?}"),
        }
        assert!(
            acquirer
                .observe("east")
                .await
                .unwrap()
                .iter()
                .all(|lease| lease.name != "x-1"),
            "x-1 was granted under the old rule"
        );
    }

    /// A change of the record asked for while a grant is in flight (the
    /// grant holds the record's row from its judgement to its commit)
    /// waits for the grant, then finds its lease held and is refused.
    #[tokio::test]
    async fn a_change_of_the_record_waits_for_a_grant_in_flight_and_sees_it_held() {
        let test = TestDatabase::create().await;
        let resharder = named(&test, "sharding-resharder");
        recorded_as_two(&resharder).await;
        let watcher = client(&test).await;
        let mut granter = client(&test).await;
        // A grant under the recorded rule, as an acquire makes it: the
        // record's row held `FOR SHARE` from its judgement, then the lease
        // granted; not committed yet.
        let grant = granter.transaction().await.unwrap();
        grant
            .batch_execute(
                "SELECT 1 FROM leasehold_shardings
                  WHERE cluster = 'east' AND controller = 'x' FOR SHARE;
                 UPDATE leasehold_leases
                    SET holder = 'host-b', epoch = epoch + 1, released = false,
                        expires_at = clock_timestamp() + interval '1 hour'
                  WHERE cluster = 'east' AND name = 'x-0'",
            )
            .await
            .unwrap();
        let three = shards(3);
        let (changed, ()) = tokio::join!(
            resharder.reshard("east", "x", Some(&three), "test"),
            async move {
                waits_for_a_lock(&watcher, "sharding-resharder").await;
                grant.commit().await.unwrap();
            }
        );
        match changed {
            Err(AuthorityError::Sharding(refusal)) => {
                assert!(
                    matches!(&refusal.conflict, ShardingConflict::Held { holder, .. } if holder == "host-b"),
                    "{refusal}"
                );
                assert_eq!(refusal.key.name, "x-0");
            }
            other => panic!("expected the change refused while x-0 is held, got {other:?}"),
        }
        let records = resharder.shardings("east").await.unwrap();
        assert_eq!(records[0].rule, shards(2), "the record is unchanged");
    }
}
