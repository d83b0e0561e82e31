//! The recorded sharding of controllers: how a controller runs as leases
//! (unsharded as one lease named as the controller, or as `shards = N`
//! leases `NAME-0 … NAME-(N-1)`, with the guest's shard label and
//! every-shard kinds), kept in the database with the leases, so that every
//! host of a cluster runs a controller's leases alike.
//!
//! Owns: [`ShardingRule`] (what a host has: its config's `shards` and its
//! guest's description), [`RecordedSharding`] (what the database keeps,
//! and who recorded it), the refusal [`ShardingRefusal`] and its words,
//! and the judgement every backend makes with them.
//!
//! The rule every backend keeps (ARCHITECTURE.md, "Sharded controllers"):
//!
//! - the first acquire of any lease of a controller records the acquiring
//!   host's rule for the controller, and which leases it runs, in the
//!   acquire's own transaction (a concurrent first record of another rule
//!   waits for it, then is judged against it);
//! - every later acquire of one of its leases (granted or not) is judged
//!   against the record: a host whose rule differs is refused, naming the
//!   record, who made it, and what this host has;
//! - a lease is run by one controller only: recording a controller whose
//!   leases another controller's record runs (`x-1` unsharded, and shard 1
//!   of `x`) is refused, whatever host recorded the other;
//! - only [`crate::authority::Authority::reshard`] changes a record (the
//!   documented count change), and only while none of the controller's
//!   leases, under the recorded rule or the new one, is held; it takes the
//!   record's lock before it looks, and every grant holds the record's lock
//!   from its judgement to its commit, so no grant under the old rule lands
//!   after the new one was recorded.
//!
//! Must never: know about Wasm (the guest's description comes in as plain
//! values), or judge a rule by anything but the record of the same
//! database.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::AuthorityError;
use crate::fence::{Epoch, LeaseKey};
use crate::names::check_label;
use crate::shard::{MAX_SHARDS, Shard};

/// How a host runs a controller as leases: its config's `shards` and what
/// its guest's `describe` says of sharding. With one lease's worth of
/// objects per lease (unsharded, or `shards = 1`) the label and the
/// every-shard kinds decide nothing and are not part of the rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ShardingRule {
    /// The controller's name in the config.
    pub controller: String,
    /// `shards` of the config; `None`: unsharded (one lease named as the
    /// controller).
    pub shards: Option<u32>,
    /// The guest's shard label (`description.shard-label`), when sharded
    /// in more than one shard.
    pub label: Option<String>,
    /// The kinds every shard watches (`description.every-shard`), sorted,
    /// each once, when sharded in more than one shard.
    pub every_shard: Vec<String>,
}

impl ShardingRule {
    /// The rule of `controller` run with `shards` by a guest that
    /// describes `label` and `every_shard`, normalised: the kinds sorted
    /// and each kept once; label and kinds dropped for one shard or none.
    pub fn new(
        controller: impl Into<String>,
        shards: Option<u32>,
        label: Option<String>,
        every_shard: impl IntoIterator<Item = String>,
    ) -> Self {
        let divides = shards.is_some_and(|n| n > 1);
        let mut every_shard: Vec<String> = if divides {
            every_shard.into_iter().collect()
        } else {
            Vec::new()
        };
        every_shard.sort();
        every_shard.dedup();
        Self {
            controller: controller.into(),
            shards,
            label: label.filter(|_| divides),
            every_shard,
        }
    }

    /// An unsharded controller's rule: one lease, named as it.
    pub fn unsharded(controller: impl Into<String>) -> Self {
        Self::new(controller, None, None, Vec::new())
    }

    /// The leases it runs as, each with its shard index (`None`: the one
    /// lease of an unsharded controller).
    pub fn leases(&self) -> Vec<(String, Option<u32>)> {
        match self.shards {
            None => vec![(self.controller.clone(), None)],
            Some(count) => Shard::all(count)
                .map(|s| (Shard::lease_name(&self.controller, s.index), Some(s.index)))
                .collect(),
        }
    }

    /// Whether it runs `lease`, and as which shard (`Some(None)`: as its
    /// one unsharded lease).
    pub fn runs(&self, lease: &str) -> Option<Option<u32>> {
        self.leases()
            .into_iter()
            .find(|(name, _)| name == lease)
            .map(|(_, shard)| shard)
    }

    /// What `lease` is to this rule, in words: `shard 1 of 2 of controller
    /// x`, or `the lease of the unsharded controller x-1`.
    pub fn role_of(&self, lease: &str) -> String {
        match (self.runs(lease), self.shards) {
            (Some(Some(index)), Some(count)) => {
                format!("shard {index} of {count} of controller {}", self.controller)
            }
            (Some(_), _) => format!("the lease of the unsharded controller {}", self.controller),
            (None, _) => format!("no lease of controller {}", self.controller),
        }
    }

    /// Check the names and bounds before anything is recorded: the
    /// controller a DNS label, 1 to [`MAX_SHARDS`] shards, every lease name
    /// a DNS label.
    pub fn validate(&self, cluster: &str) -> Result<(), AuthorityError> {
        check_label("controller", &self.controller)?;
        if let Some(count) = self.shards
            && !(1..=MAX_SHARDS).contains(&count)
        {
            return Err(AuthorityError::Invalid {
                key: LeaseKey::new(cluster, &self.controller),
                reason: format!(
                    "controller {} has {count} shards; 1 to {MAX_SHARDS} are possible",
                    self.controller
                ),
            });
        }
        for (lease, _) in self.leases() {
            check_label("lease", &lease)?;
        }
        Ok(())
    }
}

impl fmt::Display for ShardingRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shards {
            None => write!(f, "unsharded (one lease, {})", self.controller)?,
            Some(1) => write!(f, "1 shard (lease {}-0)", self.controller)?,
            Some(count) => write!(
                f,
                "{count} shards (leases {c}-0 … {c}-{})",
                count - 1,
                c = self.controller
            )?,
        }
        if self.shards.is_some_and(|n| n > 1) {
            match &self.label {
                Some(label) => write!(f, " by the shard label {label}")?,
                None => write!(f, " by kind/name")?,
            }
            if self.every_shard.is_empty() {
                write!(f, ", no kind watched by every shard")?;
            } else {
                write!(f, ", every shard watching {}", self.every_shard.join(", "))?;
            }
        }
        Ok(())
    }
}

/// A controller's sharding as the database records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedSharding {
    /// The rule recorded.
    pub rule: ShardingRule,
    /// Who recorded it: `holder NAME` (the host whose grant recorded it
    /// first), or `leasehold reshard, config of holder NAME`.
    pub recorded_by: String,
    /// When (the backend's clock).
    pub recorded_at: DateTime<Utc>,
}

impl fmt::Display for RecordedSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, recorded by {} at {}",
            self.rule,
            self.recorded_by,
            self.recorded_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    }
}

/// What `recorded_by` says of a grant's record: the holder's name.
pub fn by_holder(holder: &str) -> String {
    format!("holder {holder}")
}

/// Why a lease may not be led (or a record changed) under a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardingConflict {
    /// The controller's recorded rule differs from this host's.
    Differs {
        /// What the database records.
        recorded: RecordedSharding,
        /// What this host has.
        ours: ShardingRule,
    },
    /// `lease`, one of this host's rule's leases, is recorded as another
    /// controller's (a name collision: `x-1` and shard 1 of `x`).
    Collision {
        /// The lease both would run.
        lease: String,
        /// The other controller's record.
        other: RecordedSharding,
        /// What this host has.
        ours: ShardingRule,
    },
    /// A change of the record ([`crate::authority::Authority::reshard`])
    /// while a lease of the controller is held.
    Held {
        /// Who holds it.
        holder: String,
        /// What the database records for the controller, if anything.
        recorded: Option<RecordedSharding>,
    },
}

/// The typed refusal: which lease, of which controller, at which epoch,
/// and the conflict. Its text names what is recorded, by whom, and what
/// this host has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardingRefusal {
    /// The lease concerned (the one acquired, or the one held).
    pub key: LeaseKey,
    /// Its current epoch; `None`: never granted.
    pub epoch: Option<Epoch>,
    /// The controller this host runs the lease for (or whose record the
    /// command would change).
    pub controller: String,
    /// Why.
    pub conflict: ShardingConflict,
}

impl std::error::Error for ShardingRefusal {}

/// Where the procedure that changes a controller's sharding is.
const PROCEDURE: &str = "docs/operations.md, \"Changing a controller's sharding\"";

impl fmt::Display for ShardingRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let epoch = match self.epoch {
            Some(epoch) => format!("epoch {epoch}"),
            None => "never granted".to_string(),
        };
        let controller = &self.controller;
        match &self.conflict {
            ShardingConflict::Differs { recorded, ours } => write!(
                f,
                "refusing to lead lease {} ({epoch}) of controller {controller}: the database \
                 records controller {controller} as {recorded}; this host runs it as {ours}. \
                 Every host must run a controller's leases as recorded: run it so, or change the \
                 record by the procedure in {PROCEDURE} (leasehold reshard)",
                self.key
            ),
            ShardingConflict::Collision { lease, other, ours } => write!(
                f,
                "refusing to lead lease {} ({epoch}) of controller {controller}: the database \
                 records lease {lease} as {} ({other}); this host runs it as {}. Two controllers \
                 never share a lease: rename one, or once controller {} runs on no host, forget \
                 its record (leasehold reshard --forget {}; {PROCEDURE})",
                self.key,
                other.rule.role_of(lease),
                ours.role_of(lease),
                other.rule.controller,
                other.rule.controller,
            ),
            ShardingConflict::Held { holder, recorded } => write!(
                f,
                "refusing to change the sharding of controller {controller}: its lease {} is \
                 held by {holder} at {epoch}{}. Stop the controller on every host first (remove \
                 it from their configs and reload, or stop them) and wait until its leases show \
                 released ({PROCEDURE})",
                self.key,
                match recorded {
                    Some(recorded) => format!("; the database records it as {recorded}"),
                    None => String::new(),
                }
            ),
        }
    }
}

impl ShardingRefusal {
    /// The refusal as the authority's error.
    pub fn into_error(self) -> AuthorityError {
        AuthorityError::Sharding(Box::new(self))
    }
}

/// Judge `ours` against the record of its controller, for the lease `key`
/// at `epoch`: `Ok` when they agree.
pub fn judge(
    key: &LeaseKey,
    epoch: Option<Epoch>,
    ours: &ShardingRule,
    recorded: &RecordedSharding,
) -> Result<(), AuthorityError> {
    if recorded.rule == *ours {
        return Ok(());
    }
    Err(ShardingRefusal {
        key: key.clone(),
        epoch,
        controller: ours.controller.clone(),
        conflict: ShardingConflict::Differs {
            recorded: recorded.clone(),
            ours: ours.clone(),
        },
    }
    .into_error())
}

/// The refusal of `ours` for the lease `key` at `epoch` because `lease` is
/// recorded as `other`'s.
pub fn collision(
    key: &LeaseKey,
    epoch: Option<Epoch>,
    ours: &ShardingRule,
    lease: &str,
    other: RecordedSharding,
) -> AuthorityError {
    ShardingRefusal {
        key: key.clone(),
        epoch,
        controller: ours.controller.clone(),
        conflict: ShardingConflict::Collision {
            lease: lease.to_string(),
            other,
            ours: ours.clone(),
        },
    }
    .into_error()
}

/// The refusal to change `controller`'s record while its lease `key` is
/// held by `holder` at `epoch`.
pub fn held(
    key: &LeaseKey,
    epoch: Epoch,
    controller: &str,
    holder: &str,
    recorded: Option<RecordedSharding>,
) -> AuthorityError {
    ShardingRefusal {
        key: key.clone(),
        epoch: Some(epoch),
        controller: controller.to_string(),
        conflict: ShardingConflict::Held {
            holder: holder.to_string(),
            recorded,
        },
    }
    .into_error()
}

/// Check a change of `controller`'s record to `next`: the names, and that
/// `next` is that controller's rule.
pub fn validate_reshard(
    cluster: &str,
    controller: &str,
    next: Option<&ShardingRule>,
) -> Result<(), AuthorityError> {
    check_label("cluster", cluster)?;
    check_label("controller", controller)?;
    if let Some(next) = next {
        next.validate(cluster)?;
        if next.controller != controller {
            return Err(AuthorityError::Invalid {
                key: LeaseKey::new(cluster, controller),
                reason: format!(
                    "the sharding given is controller {}'s, not {controller}'s",
                    next.controller
                ),
            });
        }
    }
    Ok(())
}

/// The leases a change of `controller`'s record from `recorded` to `next`
/// concerns: every lease of either (each once), or the controller's own
/// name when neither says.
pub fn leases_concerned(
    controller: &str,
    recorded: Option<&ShardingRule>,
    next: Option<&ShardingRule>,
) -> Vec<String> {
    let mut leases: Vec<String> = recorded
        .into_iter()
        .chain(next)
        .flat_map(|rule| rule.leases().into_iter().map(|(lease, _)| lease))
        .collect();
    if leases.is_empty() {
        leases.push(controller.to_string());
    }
    leases.sort();
    leases.dedup();
    leases
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_rule_keeps_only_what_decides_an_objects_shard() {
        let rule = ShardingRule::new(
            "x",
            Some(4),
            Some("example.com/tenant".into()),
            ["nodes".to_string(), "a".into(), "nodes".into()],
        );
        assert_eq!(rule.every_shard, ["a", "nodes"]);
        assert_eq!(rule.label.as_deref(), Some("example.com/tenant"));
        // One shard or none: every object is the lease's, whatever the
        // guest says.
        for shards in [None, Some(1)] {
            let rule = ShardingRule::new("x", shards, Some("l".into()), ["nodes".to_string()]);
            assert_eq!((rule.label, rule.every_shard), (None, Vec::new()));
        }
        assert_eq!(
            ShardingRule::new("x", Some(2), None, Vec::new()).leases(),
            [("x-0".to_string(), Some(0)), ("x-1".to_string(), Some(1))]
        );
        assert_eq!(
            ShardingRule::unsharded("x-1").leases(),
            [("x-1".to_string(), None)]
        );
        assert_eq!(
            ShardingRule::new("x", Some(2), None, Vec::new()).role_of("x-1"),
            "shard 1 of 2 of controller x"
        );
        assert_eq!(
            ShardingRule::unsharded("x-1").role_of("x-1"),
            "the lease of the unsharded controller x-1"
        );
    }

    #[test]
    fn a_refusal_names_the_lease_the_epoch_the_record_its_author_and_this_hosts_rule() {
        let key = LeaseKey::new("east", "x-0");
        let recorded = RecordedSharding {
            rule: ShardingRule::new("x", Some(4), None, Vec::new()),
            recorded_by: by_holder("host-a"),
            recorded_at: at(),
        };
        let ours = ShardingRule::new("x", Some(2), None, Vec::new());
        let refused = judge(&key, Some(Epoch(7)), &ours, &recorded).unwrap_err();
        let text = refused.to_string();
        for part in [
            "refusing to lead lease east/x-0 (epoch 7) of controller x",
            "records controller x as 4 shards (leases x-0 … x-3) by kind/name",
            "recorded by holder host-a at 2030-01-02T03:04:05.000Z",
            "this host runs it as 2 shards (leases x-0 … x-1) by kind/name",
            "leasehold reshard",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
        let AuthorityError::Sharding(refusal) = refused else {
            panic!("not typed: {refused:?}")
        };
        assert_eq!(refusal.key, key);
        assert_eq!(refusal.controller, "x");
        assert_eq!(refusal.epoch, Some(Epoch(7)));
        assert!(judge(&key, None, &recorded.rule, &recorded).is_ok());

        let labelled = ShardingRule::new(
            "x",
            Some(4),
            Some("example.com/tenant".into()),
            ["nodes".to_string()],
        );
        let text = judge(&key, None, &labelled, &recorded)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("(never granted)")
                && text.contains(
                    "this host runs it as 4 shards (leases x-0 … x-3) by the shard label \
                     example.com/tenant, every shard watching nodes"
                ),
            "{text}"
        );

        let other = RecordedSharding {
            rule: ShardingRule::new("x", Some(2), None, Vec::new()),
            recorded_by: by_holder("host-a"),
            recorded_at: at(),
        };
        let text = collision(
            &LeaseKey::new("east", "x-1"),
            None,
            &ShardingRule::unsharded("x-1"),
            "x-1",
            other,
        )
        .to_string();
        for part in [
            "refusing to lead lease east/x-1 (never granted) of controller x-1",
            "records lease x-1 as shard 1 of 2 of controller x (2 shards",
            "recorded by holder host-a",
            "this host runs it as the lease of the unsharded controller x-1",
            "leasehold reshard --forget x",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
    }
}
