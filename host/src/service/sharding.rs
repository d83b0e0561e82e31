//! The recorded sharding as the commands see it: what `leasehold check`
//! says of a config's controllers against the database's record, and
//! `leasehold reshard`, the one way to change a record (the documented
//! procedure in docs/operations.md, "Changing a controller's sharding").
//!
//! Must never: change a record while a lease of the controller is held
//! (the authority refuses it), or judge a config by anything but the
//! record of the database it names.

use std::sync::Arc;

use crate::authority::{Authority, AuthorityError, RecordedSharding, ShardingRule};
use crate::config::{Backend, Config};
use crate::runtime::Runtime;

/// Where the procedure is, for the messages.
const PROCEDURE: &str = "docs/operations.md, \"Changing a controller's sharding\"";

/// What `check` says of one controller run as `ours` against the records
/// of its cluster: `Ok` a note, `Err` a problem (the hosts with this config
/// would refuse to lead its leases).
pub(crate) fn judge(records: &[RecordedSharding], ours: &ShardingRule) -> Result<String, String> {
    let name = &ours.controller;
    if let Some(recorded) = records.iter().find(|r| r.rule.controller == *name) {
        if recorded.rule == *ours {
            return Ok(format!(
                "controller {name}: runs as the database records it ({recorded})"
            ));
        }
        return Err(format!(
            "controller {name}: the database records it as {recorded}; this config runs it as \
             {ours}: a host with this config refuses to lead its leases. Run it as recorded, or \
             change the record by the procedure in {PROCEDURE}"
        ));
    }
    for (lease, _) in ours.leases() {
        if let Some(other) = records.iter().find(|r| r.rule.runs(&lease).is_some()) {
            return Err(format!(
                "controller {name}: the database records lease {lease} as {} ({other}); this \
                 config runs it as {}: two controllers never share a lease, and a host with this \
                 config refuses to lead it. Rename one, or once controller {} runs on no host, \
                 forget its record (leasehold reshard --forget {}; {PROCEDURE})",
                other.rule.role_of(&lease),
                ours.role_of(&lease),
                other.rule.controller,
                other.rule.controller
            ));
        }
    }
    Ok(format!(
        "controller {name}: no sharding recorded yet; the first host to acquire one of its \
         leases records {ours}"
    ))
}

/// What `check` says of every controller's rule (`Err`: its component
/// could not be asked) against `authority`'s records: (notes, problems).
pub(crate) async fn check(
    authority: &dyn Authority,
    cluster: &str,
    rules: &[Result<ShardingRule, String>],
) -> (Vec<String>, Vec<String>) {
    let (mut notes, mut problems) = (Vec::new(), Vec::new());
    let records = match authority.shardings(cluster).await {
        Ok(records) => records,
        // Not migrated yet: nothing is recorded, and `check` says so.
        Err(AuthorityError::Schema { .. }) => Vec::new(),
        Err(e) => {
            problems.push(format!("reading the recorded sharding: {e}"));
            return (notes, problems);
        }
    };
    for rule in rules {
        match rule {
            Ok(rule) => match judge(&records, rule) {
                Ok(note) => notes.push(note),
                Err(problem) => problems.push(problem),
            },
            Err(problem) => problems.push(problem.clone()),
        }
    }
    (notes, problems)
}

/// The lease authority of the database `config` names, for a command: its
/// embedded backend's data directory (shared with running hosts), or
/// PostgreSQL through unnamed statements (any pooler).
async fn authority(config: &Config) -> Result<Arc<dyn Authority>, String> {
    match config.database.backend() {
        Backend::Memory => Err(
            "the in-memory backend (url = \"memory:\") records nothing beyond its process: \
             restart its host with the new config instead"
                .to_string(),
        ),
        Backend::Embedded => {
            let db = crate::embedded::EmbeddedDb::open(
                &config.data_dir,
                crate::embedded::Access::Shared,
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(crate::authority::sqlite::SqliteAuthority::new(db)))
        }
        Backend::Postgres(url) => {
            let db = crate::db::Database::new(url, 2)
                .and_then(|db| db.configured(&config.database))
                .map_err(|e| e.to_string())?
                .with_pooler(crate::db::Pooler::Transaction);
            Ok(Arc::new(
                crate::authority::postgres::PostgresAuthority::new(
                    db,
                    config.database.expected_identity(),
                ),
            ))
        }
    }
}

/// `leasehold reshard --config FILE CONTROLLER [--forget]`: record how
/// `config` runs `controller` (its `shards`, and the shard label and
/// every-shard kinds its component describes) as the controller's
/// sharding, or with `forget` forget the record; refused while any of its
/// leases is held. Answers what was done, for the operator.
pub async fn reshard(config: &Config, controller: &str, forget: bool) -> Result<String, String> {
    let next = if forget {
        None
    } else {
        let Some(settings) = config.controllers.iter().find(|c| c.name == controller) else {
            return Err(format!(
                "the config has no controller {controller}: add it with its new shards (or give \
                 --forget to forget its record)"
            ));
        };
        let runtime = Runtime::new(&config.engine_config()).map_err(|e| e.to_string())?;
        let prepared = super::controllers::prepare(&runtime, vec![settings.clone()])
            .await
            .map_err(|problems| problems.join("; "))?;
        let rule = prepared[0].sharding_rule(&config.cluster).await?;
        Some(rule)
    };
    let authority = authority(config).await?;
    let by = format!("leasehold reshard, config of holder {}", config.holder());
    let before = authority
        .reshard(&config.cluster, controller, next.as_ref(), &by)
        .await
        .map_err(|e| e.to_string())?;
    let was = match &before {
        Some(before) => format!("was {before}"),
        None => "nothing was recorded".to_string(),
    };
    Ok(match &next {
        Some(rule) => format!(
            "controller {controller}: recorded as {rule} ({was}); start it with this config on \
             every host"
        ),
        None => format!(
            "controller {controller}: its record is forgotten ({was}); the next host to acquire \
             one of its leases records its own"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::sharding::by_holder;

    fn recorded(rule: ShardingRule) -> RecordedSharding {
        RecordedSharding {
            rule,
            recorded_by: by_holder("host-a"),
            recorded_at: chrono::DateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn check_names_a_config_that_disagrees_with_the_record() {
        let records = [recorded(ShardingRule::new("x", Some(4), None, Vec::new()))];
        let note = judge(&records, &ShardingRule::new("x", Some(4), None, Vec::new())).unwrap();
        assert!(note.contains("runs as the database records it"), "{note}");
        let problem = judge(&records, &ShardingRule::new("x", Some(2), None, Vec::new()));
        let problem = problem.unwrap_err();
        assert!(
            problem.contains("records it as 4 shards")
                && problem.contains("recorded by holder host-a")
                && problem.contains("this config runs it as 2 shards"),
            "{problem}"
        );
        let collision = judge(&records, &ShardingRule::unsharded("x-1")).unwrap_err();
        assert!(
            collision.contains("records lease x-1 as shard 1 of 4 of controller x")
                && collision.contains("the lease of the unsharded controller x-1"),
            "{collision}"
        );
        let fresh = judge(&records, &ShardingRule::unsharded("y")).unwrap();
        assert!(fresh.contains("no sharding recorded yet"), "{fresh}");
    }
}
