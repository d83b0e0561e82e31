//! The embedded backend's record of controllers' sharding
//! ([`crate::authority::sharding`]; schema version 2): judged and recorded
//! inside the acquire's own write transaction, and changed by `reshard` in
//! one of its own. SQLite runs one write transaction at a time across
//! every process on the data directory, so a judgement, the grant after it
//! and a change of the record never interleave.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{SqliteAuthority, lease_row};
use crate::authority::sharding::{self, RecordedSharding, ShardingRule};
use crate::authority::{AcquireRequest, AuthorityError};
use crate::embedded::clock::{self, Now};
use crate::embedded::describe;
use crate::fence::{Epoch, LeaseKey};
use crate::names::check_label;

/// A failed statement, as the authority's error.
fn failed(what: &str) -> impl Fn(rusqlite::Error) -> AuthorityError + '_ {
    move |e| AuthorityError::Unavailable {
        endpoint: "embedded SQLite".to_string(),
        reason: format!("{what}: {}", describe(&e)),
    }
}

/// The record of `controller` of `cluster`, if any.
fn recorded(
    tx: &Transaction<'_>,
    cluster: &str,
    controller: &str,
) -> rusqlite::Result<Option<RecordedSharding>> {
    tx.prepare_cached(
        "SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
           FROM leasehold_shardings WHERE cluster = ?1 AND controller = ?2",
    )?
    .query_row(params![cluster, controller], row)
    .optional()
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RecordedSharding> {
    let every_shard: String = r.get(3)?;
    let every_shard: Vec<String> = serde_json::from_str(&every_shard).unwrap_or_default();
    Ok(RecordedSharding {
        rule: ShardingRule::new(
            r.get::<_, String>(0)?,
            r.get::<_, Option<i64>>(1)?.map(|n| n as u32),
            r.get(2)?,
            every_shard,
        ),
        recorded_by: r.get(4)?,
        recorded_at: clock::time(r.get(5)?),
    })
}

/// The first of `rule`'s leases another controller's record runs, with
/// that record.
fn collision(
    tx: &Transaction<'_>,
    cluster: &str,
    rule: &ShardingRule,
) -> rusqlite::Result<Option<(String, RecordedSharding)>> {
    let mut owner = tx.prepare_cached(
        "SELECT controller FROM leasehold_sharded_leases WHERE cluster = ?1 AND lease = ?2",
    )?;
    for (lease, _) in rule.leases() {
        let controller: Option<String> = owner
            .query_row(params![cluster, lease], |r| r.get(0))
            .optional()?;
        if let Some(controller) = controller.filter(|c| c != &rule.controller)
            && let Some(other) = recorded(tx, cluster, &controller)?
        {
            return Ok(Some((lease, other)));
        }
    }
    Ok(None)
}

/// Record `rule` for `cluster`, by `by`, at `at` (microseconds).
fn insert(
    tx: &Transaction<'_>,
    cluster: &str,
    rule: &ShardingRule,
    by: &str,
    at: i64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO leasehold_shardings
                (cluster, controller, shards, shard_label, every_shard, recorded_by, recorded_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        cluster,
        rule.controller,
        rule.shards.map(i64::from),
        rule.label,
        serde_json::to_string(&rule.every_shard).unwrap_or_else(|_| "[]".into()),
        by,
        at
    ])?;
    let mut lease = tx.prepare_cached(
        "INSERT INTO leasehold_sharded_leases (cluster, lease, controller, shard)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (name, shard) in rule.leases() {
        lease.execute(params![
            cluster,
            name,
            rule.controller,
            shard.map(i64::from)
        ])?;
    }
    Ok(())
}

/// Forget `controller`'s record and the leases it ran.
fn remove(tx: &Transaction<'_>, cluster: &str, controller: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "DELETE FROM leasehold_sharded_leases WHERE cluster = ?1 AND controller = ?2",
    )?
    .execute(params![cluster, controller])?;
    tx.prepare_cached("DELETE FROM leasehold_shardings WHERE cluster = ?1 AND controller = ?2")?
        .execute(params![cluster, controller])?;
    Ok(())
}

/// Judge `rule` for `request`'s lease inside the acquire's transaction,
/// recording it first when its controller has no record.
pub(super) fn judge_or_record(
    tx: &Transaction<'_>,
    request: &AcquireRequest,
    rule: &ShardingRule,
    now: &Now,
) -> Result<(), AuthorityError> {
    let key = &request.key;
    rule.validate(&key.cluster)?;
    let what = format!("judging the sharding of {key}");
    let failed = failed(&what);
    let epoch = lease_row(tx, key)
        .map_err(&failed)?
        .map(|row| Epoch(row.epoch));
    if let Some(recorded) = recorded(tx, &key.cluster, &rule.controller).map_err(&failed)? {
        return sharding::judge(key, epoch, rule, &recorded);
    }
    if let Some((lease, other)) = collision(tx, &key.cluster, rule).map_err(&failed)? {
        return Err(sharding::collision(key, epoch, rule, &lease, other));
    }
    insert(
        tx,
        &key.cluster,
        rule,
        &sharding::by_holder(&request.holder),
        now.utc,
    )
    .map_err(&failed)
}

impl SqliteAuthority {
    /// [`crate::authority::Authority::shardings`].
    pub(super) async fn recorded_shardings(
        &self,
        cluster: &str,
    ) -> Result<Vec<RecordedSharding>, AuthorityError> {
        check_label("cluster", cluster)?;
        let cluster = cluster.to_string();
        self.snapshot("reading the recorded sharding", move |tx, _| {
            let failed = failed("reading the recorded sharding");
            let mut statement = tx
                .prepare_cached(
                    "SELECT controller, shards, shard_label, every_shard, recorded_by, recorded_at
                       FROM leasehold_shardings WHERE cluster = ?1 ORDER BY controller",
                )
                .map_err(&failed)?;
            let rows = statement
                .query_map(params![cluster], row)
                .map_err(&failed)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(&failed)
        })
        .await
    }

    /// [`crate::authority::Authority::reshard`], in one write transaction.
    pub(super) async fn change_sharding(
        &self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        sharding::validate_reshard(cluster, controller, next)?;
        let (cluster, controller) = (cluster.to_string(), controller.to_string());
        let (next, by) = (next.cloned(), by.to_string());
        let what = format!("changing the sharding of controller {controller}");
        self.transact(&what.clone(), move |tx, now| {
            let failed = failed(&what);
            let before = recorded(tx, &cluster, &controller).map_err(&failed)?;
            if let Some(next) = &next
                && let Some((lease, other)) = collision(tx, &cluster, next).map_err(&failed)?
            {
                let key = LeaseKey::new(&cluster, &lease);
                return Err(sharding::collision(&key, None, next, &lease, other));
            }
            for lease in sharding::leases_concerned(
                &controller,
                before.as_ref().map(|r| &r.rule),
                next.as_ref(),
            ) {
                let key = LeaseKey::new(&cluster, &lease);
                if let Some(row) = lease_row(tx, &key).map_err(&failed)?
                    && row.live(now)
                {
                    return Err(sharding::held(
                        &key,
                        Epoch(row.epoch),
                        &controller,
                        &row.holder,
                        before,
                    ));
                }
            }
            remove(tx, &cluster, &controller).map_err(&failed)?;
            if let Some(next) = &next {
                insert(tx, &cluster, next, &by, now.utc).map_err(&failed)?;
            }
            Ok(before)
        })
        .await
    }
}
