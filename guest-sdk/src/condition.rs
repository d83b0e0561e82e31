//! Conditions: the part of a status that says, per aspect of an object,
//! whether it holds, why, and since when, shaped like Kubernetes'
//! `metav1.Condition`.
//!
//! A status keeps them as a list under `conditions`, one per `type`:
//!
//! ```json
//! { "conditions": [ { "type": "Ready", "status": "True", "reason": "Provisioned",
//!     "message": "applied by the cloud", "observed_generation": 3,
//!     "last_transition_time": "2026-01-01T00:00:00Z" } ] }
//! ```
//!
//! The names on the wire are the same in every SDK of this repository:
//! `type`, `status` (`True`, `False` or `Unknown`), `reason`, `message`,
//! `observed_generation` and `last_transition_time` (RFC 3339 text in UTC,
//! to the second). Owns: [`Condition`], [`ConditionStatus`] and the list
//! helpers [`set_condition`], [`get_condition`], [`remove_condition`].
//! Must never: move `last_transition_time` unless the status changed, or
//! take it from anything but the wall clock ([`crate::clock::now`]).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::clock;

/// Whether a condition holds: `True`, `False` or `Unknown` on the wire.
///
/// # Example
///
/// ```
/// use leasehold_guest::ConditionStatus;
///
/// assert_eq!(ConditionStatus::from(true), ConditionStatus::True);
/// assert_eq!(serde_json::to_value(ConditionStatus::Unknown).unwrap(), "Unknown");
/// assert_eq!(ConditionStatus::False.as_str(), "False");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// The controller cannot tell (yet): work in progress, or an answer
    /// it is waiting for.
    Unknown,
}

impl ConditionStatus {
    /// Its name on the wire.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold_guest::ConditionStatus::True.as_str(), "True");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    /// `True` or `False`.
    fn from(holds: bool) -> Self {
        if holds {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition of an object's status (Kubernetes' `metav1.Condition`).
///
/// Keep them in a `Vec<Condition>` field named `conditions` of your status
/// type, and change the list only through [`set_condition`] and
/// [`remove_condition`], which keep one condition per `type` and move
/// `last_transition_time` only when the status changes.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Condition, ConditionStatus, FakeHost};
/// use serde_json::json;
///
/// let host = FakeHost::new(); // its clock starts at 2026-01-01T00:00:00Z
/// let ready = Condition::new("Ready", ConditionStatus::True, "Provisioned", "applied")
///     .with_generation(3);
/// assert_eq!(
///     serde_json::to_value(&ready).unwrap(),
///     json!({
///         "type": "Ready",
///         "status": "True",
///         "reason": "Provisioned",
///         "message": "applied",
///         "observed_generation": 3,
///         "last_transition_time": "2026-01-01T00:00:00Z",
///     })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// What the condition is about, in PascalCase: `Ready`, `Available`.
    /// One condition per type in a list.
    pub r#type: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// Why, in one PascalCase word, for programs: `Provisioned`.
    pub reason: String,
    /// Why, for people. May be empty.
    #[serde(default)]
    pub message: String,
    /// The object's generation the condition was computed from
    /// ([`crate::Object::generation`]): a reader compares it with the
    /// object's to tell a condition about the current spec from a stale
    /// one. 0 if not given.
    #[serde(default)]
    pub observed_generation: u64,
    /// When the status last changed, from the wall clock, to the second;
    /// RFC 3339 text in UTC on the wire (`2026-01-01T00:00:00Z`; any RFC
    /// 3339 offset and fraction is read).
    #[serde(with = "rfc3339")]
    pub last_transition_time: SystemTime,
}

impl Condition {
    /// A condition of `type` with `status`, `reason` and `message`,
    /// observed at generation 0 (set it with
    /// [`Condition::with_generation`]) and timed now
    /// ([`crate::clock::now`], to the second).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Condition, ConditionStatus, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// let c = Condition::new("Ready", ConditionStatus::Unknown, "Provisioning", "");
    /// assert_eq!((c.r#type.as_str(), c.observed_generation), ("Ready", 0));
    /// assert_eq!(c.last_transition_time, host.now());
    /// ```
    pub fn new(
        r#type: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            r#type: r#type.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            observed_generation: 0,
            last_transition_time: now_to_the_second(),
        }
    }

    /// The same condition, computed from the object's `generation`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Condition, ConditionStatus, FakeHost};
    ///
    /// let _host = FakeHost::new();
    /// let c = Condition::new("Ready", ConditionStatus::True, "Done", "").with_generation(4);
    /// assert_eq!(c.observed_generation, 4);
    /// ```
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.observed_generation = generation;
        self
    }

    /// Whether the status is `True`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Condition, ConditionStatus, FakeHost};
    ///
    /// let _host = FakeHost::new();
    /// assert!(Condition::new("Ready", ConditionStatus::True, "Done", "").is_true());
    /// assert!(!Condition::new("Ready", ConditionStatus::Unknown, "Busy", "").is_true());
    /// ```
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// The wall clock cut to the second: what a condition's time is written
/// with, so a condition read back equals the one written.
fn now_to_the_second() -> SystemTime {
    let now = clock::now();
    match now.duration_since(UNIX_EPOCH) {
        Ok(since) => UNIX_EPOCH + Duration::from_secs(since.as_secs()),
        Err(_) => now,
    }
}

/// Put `condition` into `conditions`, replacing the one of its type, and
/// say whether anything changed (so a controller writes the status only
/// when it did).
///
/// `last_transition_time` is set from the wall clock
/// ([`crate::clock::now`], to the second) when the condition is new or its
/// status changed; when only the reason, message or observed generation
/// changed it keeps its time. The given condition's own time is not used.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Condition, ConditionStatus, FakeHost, get_condition, set_condition};
///
/// let host = FakeHost::new();
/// let started = host.now();
/// let mut conditions = Vec::new();
/// let pending = Condition::new("Ready", ConditionStatus::Unknown, "Provisioning", "");
/// assert!(set_condition(&mut conditions, pending.clone()));
/// assert!(!set_condition(&mut conditions, pending), "nothing changed");
///
/// // Later, the same status with a new message: the time stays.
/// host.advance(Duration::from_secs(30));
/// let waiting = Condition::new("Ready", ConditionStatus::Unknown, "Provisioning", "still waiting");
/// assert!(set_condition(&mut conditions, waiting));
/// assert_eq!(get_condition(&conditions, "Ready").unwrap().last_transition_time, started);
///
/// // A new status: the time moves to now.
/// host.advance(Duration::from_secs(30));
/// let ready = Condition::new("Ready", ConditionStatus::True, "Provisioned", "");
/// assert!(set_condition(&mut conditions, ready));
/// let ready = get_condition(&conditions, "Ready").unwrap();
/// assert_eq!(ready.last_transition_time, host.now());
/// assert_eq!(conditions.len(), 1, "one condition per type");
/// ```
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.r#type == condition.r#type) else {
        conditions.push(Condition {
            last_transition_time: now_to_the_second(),
            ..condition
        });
        return true;
    };
    let transition = existing.status != condition.status;
    let changed = transition
        || existing.reason != condition.reason
        || existing.message != condition.message
        || existing.observed_generation != condition.observed_generation;
    if transition {
        existing.last_transition_time = now_to_the_second();
    }
    existing.status = condition.status;
    existing.reason = condition.reason;
    existing.message = condition.message;
    existing.observed_generation = condition.observed_generation;
    changed
}

/// The condition of `type` in `conditions`, if any.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Condition, ConditionStatus, FakeHost, get_condition, set_condition};
///
/// let _host = FakeHost::new();
/// let mut conditions = Vec::new();
/// set_condition(&mut conditions, Condition::new("Ready", ConditionStatus::True, "Done", ""));
/// assert!(get_condition(&conditions, "Ready").is_some_and(Condition::is_true));
/// assert!(get_condition(&conditions, "Degraded").is_none());
/// ```
pub fn get_condition<'a>(conditions: &'a [Condition], r#type: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.r#type == r#type)
}

/// Remove the condition of `type` from `conditions`; whether there was
/// one.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Condition, ConditionStatus, FakeHost, remove_condition, set_condition};
///
/// let _host = FakeHost::new();
/// let mut conditions = Vec::new();
/// set_condition(&mut conditions, Condition::new("Degraded", ConditionStatus::True, "Slow", ""));
/// assert!(remove_condition(&mut conditions, "Degraded"));
/// assert!(!remove_condition(&mut conditions, "Degraded"));
/// assert!(conditions.is_empty());
/// ```
pub fn remove_condition(conditions: &mut Vec<Condition>, r#type: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.r#type != r#type);
    conditions.len() != before
}

/// `last_transition_time` as RFC 3339 text: written in UTC to the second
/// (`2026-01-01T00:00:00Z`), read with any offset and fraction.
mod rfc3339 {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(
        at: &SystemTime,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format(*at))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).ok_or_else(|| {
            de::Error::invalid_value(
                de::Unexpected::Str(&text),
                &"an RFC 3339 time such as 2026-01-01T00:00:00Z",
            )
        })
    }

    /// Seconds since the Unix epoch, negative before it (whole seconds,
    /// rounded down).
    fn seconds(at: SystemTime) -> i64 {
        match at.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            Err(before) => {
                let before = before.duration();
                let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
                if before.subsec_nanos() > 0 {
                    -whole - 1
                } else {
                    -whole
                }
            }
        }
    }

    /// Days since 1970-01-01 of a date of the proleptic Gregorian
    /// calendar. Counts in 400-year cycles (146,097 days each) of years
    /// that start on 1 March, so the leap day ends its year.
    pub(super) fn days_from_date(year: i64, month: u32, day: u32) -> i64 {
        let year = if month <= 2 { year - 1 } else { year };
        let cycle = year.div_euclid(400);
        let year_of_cycle = year - cycle * 400;
        let month_from_march = i64::from((month + 9) % 12);
        let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
        let day_of_cycle =
            year_of_cycle * 365 + year_of_cycle / 4 - year_of_cycle / 100 + day_of_year;
        // 719,468 days from 0000-03-01 to 1970-01-01.
        cycle * 146_097 + day_of_cycle - 719_468
    }

    /// The date `days` after 1970-01-01: the inverse of
    /// [`days_from_date`].
    pub(super) fn date_from_days(days: i64) -> (i64, u32, u32) {
        let days = days + 719_468;
        let cycle = days.div_euclid(146_097);
        let day_of_cycle = days - cycle * 146_097;
        let year_of_cycle = (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36_524
            - day_of_cycle / 146_096)
            / 365;
        let day_of_year =
            day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
        let month_from_march = (5 * day_of_year + 2) / 153;
        let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
        let month = if month_from_march < 10 {
            month_from_march + 3
        } else {
            month_from_march - 9
        } as u32;
        let year = year_of_cycle + cycle * 400 + i64::from(month <= 2);
        (year, month, day)
    }

    /// `at` in UTC to the second: `YYYY-MM-DDTHH:MM:SSZ`.
    pub(super) fn format(at: SystemTime) -> String {
        let seconds = seconds(at);
        let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = date_from_days(days);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60
        )
    }

    /// `count` ASCII digits at the start of `text`, as a number, and the
    /// rest.
    fn digits(text: &str, count: usize) -> Option<(u32, &str)> {
        let head = text.get(..count)?;
        if !head.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((head.parse().ok()?, &text[count..]))
    }

    fn expect(text: &str, what: &[char]) -> Option<char> {
        let c = text.chars().next()?;
        what.contains(&c).then_some(c)
    }

    /// An RFC 3339 date-time (`2026-01-01T12:00:00.5+02:00`, `t` and `z`
    /// in either case); `None` if `text` is not one.
    pub(super) fn parse(text: &str) -> Option<SystemTime> {
        let (year, rest) = digits(text, 4)?;
        expect(rest, &['-'])?;
        let (month, rest) = digits(&rest[1..], 2)?;
        expect(rest, &['-'])?;
        let (day, rest) = digits(&rest[1..], 2)?;
        expect(rest, &['T', 't'])?;
        let (hour, rest) = digits(&rest[1..], 2)?;
        expect(rest, &[':'])?;
        let (minute, rest) = digits(&rest[1..], 2)?;
        expect(rest, &[':'])?;
        let (second, mut rest) = digits(&rest[1..], 2)?;
        let mut nanos = 0u32;
        if rest.starts_with('.') {
            let fraction: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
            if fraction.is_empty() {
                return None;
            }
            let padded: String = fraction
                .chars()
                .chain(std::iter::repeat('0'))
                .take(9)
                .collect();
            nanos = padded.parse().ok()?;
            rest = &rest[1 + fraction.len()..];
        }
        let offset_seconds: i64 = match expect(rest, &['Z', 'z', '+', '-'])? {
            'Z' | 'z' if rest.len() == 1 => 0,
            sign @ ('+' | '-') => {
                let (hours, after) = digits(&rest[1..], 2)?;
                expect(after, &[':'])?;
                let (minutes, after) = digits(&after[1..], 2)?;
                if !after.is_empty() || hours > 23 || minutes > 59 {
                    return None;
                }
                let offset = i64::from(hours * 3600 + minutes * 60);
                if sign == '+' { offset } else { -offset }
            }
            _ => return None,
        };
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let days_in_month = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        // A leap second (60) is read as the second before the next minute.
        if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let seconds = days_from_date(i64::from(year), month, day) * 86_400
            + i64::from(hour * 3600 + minute * 60 + second.min(59))
            - offset_seconds;
        let whole = Duration::from_secs(seconds.unsigned_abs());
        let at = if seconds >= 0 {
            UNIX_EPOCH + whole
        } else {
            UNIX_EPOCH - whole
        };
        Some(at + Duration::from_nanos(u64::from(nanos)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::json;

    use super::rfc3339::{date_from_days, days_from_date, format, parse};
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn times_are_written_in_utc_to_the_second() {
        assert_eq!(format(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(format(at(1_767_225_600)), "2026-01-01T00:00:00Z");
        // A leap day, and the end of a century that is not a leap year.
        assert_eq!(format(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(format(at(4_107_542_399)), "2100-02-28T23:59:59Z");
        assert_eq!(format(at(4_107_542_400)), "2100-03-01T00:00:00Z");
        assert_eq!(
            format(at(1_767_225_600) + Duration::from_millis(999)),
            "2026-01-01T00:00:00Z",
            "a fraction is cut, not rounded"
        );
        assert_eq!(
            format(UNIX_EPOCH - Duration::from_secs(1)),
            "1969-12-31T23:59:59Z"
        );
    }

    #[test]
    fn every_day_of_four_centuries_round_trips() {
        // 1900-01-01 to 2300-01-01: every kind of year boundary.
        let (first, last) = (days_from_date(1900, 1, 1), days_from_date(2300, 1, 1));
        assert_eq!(last - first, 146_097, "400 Gregorian years");
        let mut previous = date_from_days(first - 1);
        for days in first..last {
            let date = date_from_days(days);
            assert_eq!(days_from_date(date.0, date.1, date.2), days, "{date:?}");
            assert!(date > previous, "{date:?} after {previous:?}");
            previous = date;
        }
    }

    #[test]
    fn rfc_3339_times_are_read_with_any_offset_and_fraction() {
        let new_year = at(1_767_225_600);
        for text in [
            "2026-01-01T00:00:00Z",
            "2026-01-01t00:00:00z",
            "2026-01-01T02:00:00+02:00",
            "2025-12-31T19:30:00-04:30",
        ] {
            assert_eq!(parse(text), Some(new_year), "{text}");
        }
        assert_eq!(
            parse("2026-01-01T00:00:00.25Z"),
            Some(new_year + Duration::from_millis(250))
        );
        assert_eq!(
            parse("1969-12-31T23:59:59Z"),
            Some(UNIX_EPOCH - Duration::from_secs(1))
        );
        for bad in [
            "",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "2026-01-01 00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+0200",
            "2026-01-01T00:00:00Zjunk",
            "２026-01-01T00:00:00Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_condition_has_the_wire_names_of_every_sdk() {
        let condition = Condition {
            r#type: "Ready".into(),
            status: ConditionStatus::False,
            reason: "Refused".into(),
            message: "region is full".into(),
            observed_generation: 7,
            last_transition_time: at(1_767_225_600),
        };
        let wire = json!({
            "type": "Ready",
            "status": "False",
            "reason": "Refused",
            "message": "region is full",
            "observed_generation": 7,
            "last_transition_time": "2026-01-01T00:00:00Z",
        });
        assert_eq!(serde_json::to_value(&condition).unwrap(), wire);
        assert_eq!(
            serde_json::from_value::<Condition>(wire).unwrap(),
            condition
        );
        // Written elsewhere with an offset and without the optional parts.
        let read: Condition = serde_json::from_value(json!({
            "type": "Ready", "status": "Unknown", "reason": "Waiting",
            "last_transition_time": "2026-01-01T01:00:00+01:00",
        }))
        .unwrap();
        assert_eq!(
            (
                read.message.as_str(),
                read.observed_generation,
                read.last_transition_time
            ),
            ("", 0, at(1_767_225_600))
        );
        assert!(
            serde_json::from_value::<Condition>(json!({
                "type": "Ready", "status": "Maybe", "reason": "X",
                "last_transition_time": "2026-01-01T00:00:00Z",
            }))
            .is_err()
        );
    }
}
