//! The memory backend's record of controllers' sharding
//! ([`crate::authority::sharding`]): kept under the state lock, so a
//! judgement, the grant after it and a change of the record never
//! interleave.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::authority::AuthorityError;
use crate::authority::sharding::{self, RecordedSharding, ShardingRule};
use crate::fence::{Epoch, LeaseKey};

/// Every recorded sharding, and which controller runs each lease.
#[derive(Default)]
pub(super) struct Records {
    /// By (cluster, controller).
    rules: BTreeMap<(String, String), RecordedSharding>,
    /// By (cluster, lease): the controller whose record runs it.
    leases: BTreeMap<(String, String), String>,
}

impl Records {
    fn rule(&self, cluster: &str, controller: &str) -> Option<&RecordedSharding> {
        self.rules
            .get(&(cluster.to_string(), controller.to_string()))
    }

    /// The first of `rule`'s leases another controller's record runs, with
    /// that record.
    fn collision(&self, cluster: &str, rule: &ShardingRule) -> Option<(String, RecordedSharding)> {
        rule.leases().into_iter().find_map(|(lease, _)| {
            let owner = self.leases.get(&(cluster.to_string(), lease.clone()))?;
            (owner != &rule.controller)
                .then(|| self.rule(cluster, owner).cloned())
                .flatten()
                .map(|other| (lease, other))
        })
    }

    fn insert(&mut self, cluster: &str, recorded: RecordedSharding) {
        let controller = recorded.rule.controller.clone();
        for (lease, _) in recorded.rule.leases() {
            self.leases
                .insert((cluster.to_string(), lease), controller.clone());
        }
        self.rules
            .insert((cluster.to_string(), controller), recorded);
    }

    fn remove(&mut self, cluster: &str, controller: &str) -> Option<RecordedSharding> {
        let removed = self
            .rules
            .remove(&(cluster.to_string(), controller.to_string()))?;
        for (lease, _) in removed.rule.leases() {
            self.leases.remove(&(cluster.to_string(), lease));
        }
        Some(removed)
    }

    /// Judge `rule` for the lease `key` (at `epoch`), recording it first
    /// when its controller has no record.
    pub(super) fn judge_or_record(
        &mut self,
        key: &LeaseKey,
        epoch: Option<Epoch>,
        rule: &ShardingRule,
        holder: &str,
        at: DateTime<Utc>,
    ) -> Result<(), AuthorityError> {
        rule.validate(&key.cluster)?;
        let cluster = &key.cluster;
        if let Some(recorded) = self.rule(cluster, &rule.controller) {
            return sharding::judge(key, epoch, rule, recorded);
        }
        if let Some((lease, other)) = self.collision(cluster, rule) {
            return Err(sharding::collision(key, epoch, rule, &lease, other));
        }
        self.insert(
            cluster,
            RecordedSharding {
                rule: rule.clone(),
                recorded_by: sharding::by_holder(holder),
                recorded_at: at,
            },
        );
        Ok(())
    }

    /// Every record of `cluster`.
    pub(super) fn of(&self, cluster: &str) -> Vec<RecordedSharding> {
        self.rules
            .iter()
            .filter(|((c, _), _)| c == cluster)
            .map(|(_, recorded)| recorded.clone())
            .collect()
    }

    /// Change `controller`'s record to `next` (see
    /// [`crate::authority::Authority::reshard`]); `held` tells who holds a
    /// lease now, at which epoch.
    pub(super) fn reshard(
        &mut self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
        at: DateTime<Utc>,
        held: impl Fn(&str) -> Option<(String, Epoch)>,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        let recorded = self.rule(cluster, controller).cloned();
        if let Some(next) = next
            && let Some((lease, other)) = self.collision(cluster, next)
        {
            let key = LeaseKey::new(cluster, &lease);
            return Err(sharding::collision(&key, None, next, &lease, other));
        }
        for lease in
            sharding::leases_concerned(controller, recorded.as_ref().map(|r| &r.rule), next)
        {
            if let Some((holder, epoch)) = held(&lease) {
                return Err(sharding::held(
                    &LeaseKey::new(cluster, &lease),
                    epoch,
                    controller,
                    &holder,
                    recorded,
                ));
            }
        }
        let removed = self.remove(cluster, controller);
        if let Some(next) = next {
            self.insert(
                cluster,
                RecordedSharding {
                    rule: next.clone(),
                    recorded_by: by.to_string(),
                    recorded_at: at,
                },
            );
        }
        Ok(removed)
    }
}
