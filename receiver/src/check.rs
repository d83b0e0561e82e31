//! The checker: judges a record (from [`crate::RunningReceiver::record`],
//! `GET /_record` or a record file) by the fenced-receiver rule, from the
//! receiver's own decision order (`seq`), never from anyone's clock.
//!
//! The rules, per lease:
//!
//! 1. **No idempotency key is applied twice.** A retry of an effect whose
//!    answer was lost must come back as a replay.
//! 2. **Accepted epochs never go backwards.** The epochs of the requests
//!    the receiver accepted (applied or replayed) never decrease in `seq`
//!    order.
//! 3. **A stale request is always refused** (stricter; what the fault
//!    suite asserts): once a request of epoch `e + k` (`k > 0`) was
//!    accepted, every later request of epoch `e` is refused as stale, not
//!    rejected for another reason, replayed or applied. Rule 3 implies rule
//!    2; a record breaking rule 2 is reported under both.
//! 4. **Nothing unfenced is accepted**: every applied or replayed request
//!    carried a lease and an epoch.
//!
//! Reads (`GET`) are not fenced and are ignored.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::record::{Outcome, RecordEntry};

/// One way a record breaks the fenced-receiver rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    /// Rule 1: an idempotency key was applied a second time.
    KeyAppliedTwice {
        /// The key.
        key: String,
        /// The entry that applied it first.
        first_seq: u64,
        /// The entry that applied it again.
        seq: u64,
    },
    /// Rule 2: an accepted request's epoch is below one accepted earlier
    /// for the same lease.
    AcceptedEpochWentBack {
        /// The lease.
        lease: String,
        /// The entry accepted out of order.
        seq: u64,
        /// Its epoch.
        epoch: u64,
        /// The earlier accepted entry with the higher epoch.
        highest_seq: u64,
        /// That entry's epoch.
        highest: u64,
    },
    /// Rule 3: a request arrived with an epoch below one already accepted
    /// for its lease and was not refused as stale.
    StaleNotRefused {
        /// The lease.
        lease: String,
        /// The entry.
        seq: u64,
        /// Its epoch.
        epoch: u64,
        /// What the receiver did instead.
        outcome: Outcome,
        /// The earlier accepted entry with the higher epoch.
        highest_seq: u64,
        /// That entry's epoch.
        highest: u64,
    },
    /// Rule 4: a request was applied or replayed without a lease or epoch.
    AcceptedUnfenced {
        /// The entry.
        seq: u64,
        /// What the receiver did.
        outcome: Outcome,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::KeyAppliedTwice {
                key,
                first_seq,
                seq,
            } => write!(
                f,
                "idempotency key {key:?} applied twice: at #{first_seq} and again at #{seq}"
            ),
            Violation::AcceptedEpochWentBack {
                lease,
                seq,
                epoch,
                highest_seq,
                highest,
            } => write!(
                f,
                "lease {lease}: #{seq} was accepted at epoch {epoch} after #{highest_seq} was \
                 accepted at epoch {highest}"
            ),
            Violation::StaleNotRefused {
                lease,
                seq,
                epoch,
                outcome,
                highest_seq,
                highest,
            } => write!(
                f,
                "lease {lease}: #{seq} arrived at epoch {epoch} after #{highest_seq} was \
                 accepted at epoch {highest}, and was {outcome} instead of refused as stale"
            ),
            Violation::AcceptedUnfenced { seq, outcome } => {
                write!(f, "#{seq} was {outcome} without a lease and epoch")
            }
        }
    }
}

/// Judge `record` by the rules in this module's documentation; every
/// violation found, in `seq` order. An empty result means the record keeps
/// the fenced-receiver rule.
///
/// Entries are judged in `seq` order whatever order they are given in.
pub fn check(record: &[RecordEntry]) -> Vec<Violation> {
    let mut entries: Vec<&RecordEntry> = record.iter().collect();
    entries.sort_by_key(|e| e.seq);

    let mut violations = Vec::new();
    let mut applied_keys: HashMap<&str, u64> = HashMap::new();
    // Per lease: the highest accepted epoch so far and the entry that
    // carried it.
    let mut highest: HashMap<&str, (u64, u64)> = HashMap::new();

    for entry in entries {
        if entry.outcome == Outcome::Read {
            continue;
        }
        if entry.outcome == Outcome::Applied
            && let Some(key) = entry.idempotency_key.as_deref()
        {
            match applied_keys.get(key) {
                Some(&first_seq) => violations.push(Violation::KeyAppliedTwice {
                    key: key.to_string(),
                    first_seq,
                    seq: entry.seq,
                }),
                None => {
                    applied_keys.insert(key, entry.seq);
                }
            }
        }
        let (Some(lease), Some(epoch)) = (entry.lease.as_deref(), entry.epoch) else {
            if entry.outcome.is_accepted() {
                violations.push(Violation::AcceptedUnfenced {
                    seq: entry.seq,
                    outcome: entry.outcome,
                });
            }
            continue;
        };
        let mark = highest.get(lease).copied();
        if let Some((highest_epoch, highest_seq)) = mark
            && epoch < highest_epoch
        {
            if entry.outcome != Outcome::Stale {
                violations.push(Violation::StaleNotRefused {
                    lease: lease.to_string(),
                    seq: entry.seq,
                    epoch,
                    outcome: entry.outcome,
                    highest_seq,
                    highest: highest_epoch,
                });
            }
            if entry.outcome.is_accepted() {
                violations.push(Violation::AcceptedEpochWentBack {
                    lease: lease.to_string(),
                    seq: entry.seq,
                    epoch,
                    highest_seq,
                    highest: highest_epoch,
                });
            }
        }
        if entry.outcome.is_accepted()
            && mark.is_none_or(|(highest_epoch, _)| epoch > highest_epoch)
        {
            highest.insert(lease, (epoch, entry.seq));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    /// A fenced `PUT` entry of `lease` at `epoch` with `key`.
    fn entry(seq: u64, lease: &str, epoch: u64, key: &str, outcome: Outcome) -> RecordEntry {
        RecordEntry {
            seq,
            arrived_at: Utc::now(),
            method: "PUT".into(),
            path: "/buckets/a".into(),
            lease: Some(lease.into()),
            epoch: Some(epoch),
            holder: Some("host-1".into()),
            idempotency_key: Some(key.into()),
            outcome,
            status: match outcome {
                Outcome::Applied | Outcome::Replayed | Outcome::Read => 200,
                Outcome::Stale => 409,
                Outcome::Rejected => 422,
            },
            resource: outcome.is_accepted().then(|| "buckets/a".into()),
            generation: outcome.is_accepted().then_some(seq),
            detail: None,
            fault: None,
        }
    }

    use Outcome::{Applied, Read, Rejected, Replayed, Stale};

    #[test]
    fn a_good_record_passes() {
        let record = vec![
            entry(1, "c/p", 1, "k1", Applied),
            entry(2, "c/p", 1, "k1", Replayed),
            // A new leader raises the mark; the old one is refused.
            entry(3, "c/p", 2, "k2", Applied),
            entry(4, "c/p", 1, "k3", Stale),
            // A stale request is refused even for a key already applied.
            entry(5, "c/p", 1, "k1", Stale),
            // The new leader replays the old leader's key: accepted.
            entry(6, "c/p", 2, "k1", Replayed),
            // A rejection at the current epoch is fine.
            entry(7, "c/p", 2, "k2", Rejected),
            // Another lease has its own mark.
            entry(8, "c/q", 1, "k4", Applied),
            // Reads are not judged, whatever their epoch.
            entry(9, "c/p", 1, "k5", Read),
        ];
        assert_eq!(check(&record), vec![]);
    }

    #[test]
    fn a_key_applied_twice_is_flagged() {
        let record = vec![
            entry(1, "c/p", 1, "k1", Applied),
            entry(2, "c/p", 1, "k1", Applied),
        ];
        assert_eq!(
            check(&record),
            vec![Violation::KeyAppliedTwice {
                key: "k1".into(),
                first_seq: 1,
                seq: 2
            }]
        );
    }

    #[test]
    fn an_accepted_epoch_going_back_is_flagged_under_both_rules() {
        let record = vec![
            entry(1, "c/p", 3, "k1", Applied),
            entry(2, "c/p", 2, "k2", Applied),
            // A replay counts as accepted too.
            entry(3, "c/p", 1, "k1", Replayed),
        ];
        let violations = check(&record);
        assert_eq!(
            violations,
            vec![
                Violation::StaleNotRefused {
                    lease: "c/p".into(),
                    seq: 2,
                    epoch: 2,
                    outcome: Applied,
                    highest_seq: 1,
                    highest: 3
                },
                Violation::AcceptedEpochWentBack {
                    lease: "c/p".into(),
                    seq: 2,
                    epoch: 2,
                    highest_seq: 1,
                    highest: 3
                },
                Violation::StaleNotRefused {
                    lease: "c/p".into(),
                    seq: 3,
                    epoch: 1,
                    outcome: Replayed,
                    highest_seq: 1,
                    highest: 3
                },
                Violation::AcceptedEpochWentBack {
                    lease: "c/p".into(),
                    seq: 3,
                    epoch: 1,
                    highest_seq: 1,
                    highest: 3
                },
            ]
        );
    }

    #[test]
    fn a_stale_request_rejected_for_another_reason_is_flagged() {
        // Nothing was applied, but the stale leader was not told it is
        // stale: the stricter rule catches it.
        let record = vec![
            entry(1, "c/p", 2, "k1", Applied),
            entry(2, "c/p", 1, "k2", Rejected),
        ];
        assert_eq!(
            check(&record),
            vec![Violation::StaleNotRefused {
                lease: "c/p".into(),
                seq: 2,
                epoch: 1,
                outcome: Rejected,
                highest_seq: 1,
                highest: 2
            }]
        );
    }

    #[test]
    fn only_accepted_requests_raise_the_mark() {
        // Refused requests at a higher epoch (rejected, or even wrongly
        // marked stale) do not make later lower epochs stale.
        let record = vec![
            entry(1, "c/p", 5, "k1", Rejected),
            entry(2, "c/p", 6, "k2", Stale),
            entry(3, "c/p", 1, "k3", Applied),
        ];
        assert_eq!(check(&record), vec![]);
    }

    #[test]
    fn an_unfenced_acceptance_is_flagged() {
        let mut unfenced = entry(2, "c/p", 1, "k2", Applied);
        unfenced.lease = None;
        let mut rejected = entry(3, "c/p", 1, "k3", Rejected);
        rejected.epoch = None;
        let record = vec![entry(1, "c/p", 1, "k1", Applied), unfenced, rejected];
        assert_eq!(
            check(&record),
            vec![Violation::AcceptedUnfenced {
                seq: 2,
                outcome: Applied
            }]
        );
    }

    #[test]
    fn entries_are_judged_in_seq_order() {
        let record = vec![
            entry(2, "c/p", 1, "k2", Stale),
            entry(1, "c/p", 2, "k1", Applied),
        ];
        assert_eq!(check(&record), vec![]);
        let record = vec![
            entry(2, "c/p", 2, "k2", Applied),
            entry(1, "c/p", 1, "k1", Stale),
        ];
        // Seq 1 was refused before anything was accepted: wrongly, but
        // that is not a safety violation.
        assert_eq!(check(&record), vec![]);
    }

    #[test]
    fn violations_read_as_sentences() {
        let text = Violation::StaleNotRefused {
            lease: "c/p".into(),
            seq: 7,
            epoch: 1,
            outcome: Applied,
            highest_seq: 3,
            highest: 2,
        }
        .to_string();
        assert_eq!(
            text,
            "lease c/p: #7 arrived at epoch 1 after #3 was accepted at epoch 2, and was applied \
             instead of refused as stale"
        );
    }
}
