//! What a guest reads besides the store: the controller's settings and
//! the wall clock, both set by the test.
//!
//! Owns: [`FakeHost::set_settings`], [`FakeHost::set_settings_json`],
//! [`FakeHost::set_now`], [`FakeHost::advance`], [`FakeHost::now`], and
//! the fake's answers to the SDK's `settings` and `now` calls. Must never:
//! accept settings the host would refuse (not a JSON object, larger than
//! [`MAX_SETTINGS_BYTES`]), or move the clock by itself: a test's time
//! passes only when the test says so.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::FakeHost;
use crate::limits::MAX_SETTINGS_BYTES;

/// Where a new fake's clock starts: 2026-01-01T00:00:00Z, a fixed time so
/// tests are repeatable.
pub(super) const START: Duration = Duration::from_secs(1_767_225_600);

/// The settings a new fake hands out: none, as for a config entry without
/// `[controllers.settings]`.
pub(super) const NO_SETTINGS: &str = "{}";

impl FakeHost {
    /// Hand the guest `settings`, as the host hands it a controller's
    /// `[controllers.settings]` table: what [`crate::settings`] and
    /// [`crate::settings_json`] read from now on. A new fake has `{}`.
    ///
    /// # Panics
    ///
    /// If `settings` does not serialize to a JSON object, or is larger
    /// than [`MAX_SETTINGS_BYTES`] as JSON: the host refuses such a config.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize)]
    /// struct Limits {
    ///     max_per_project: u32,
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.set_settings(&serde_json::json!({ "max_per_project": 4 }));
    /// let limits: Limits = leasehold_guest::settings()?;
    /// assert_eq!(limits.max_per_project, 4);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn set_settings<T: Serialize + ?Sized>(&self, settings: &T) {
        let value = serde_json::to_value(settings)
            .unwrap_or_else(|e| panic!("the settings do not serialize: {e}"));
        assert!(
            value.is_object(),
            "settings are a table in the host's config, so a JSON object; this is not one"
        );
        let text = value.to_string();
        assert!(
            text.len() <= MAX_SETTINGS_BYTES,
            "the settings are {} bytes of JSON; the host allows at most {MAX_SETTINGS_BYTES}",
            text.len()
        );
        self.state.borrow_mut().settings = text;
    }

    /// [`FakeHost::set_settings`] from JSON text, e.g. a file the test
    /// shares with a config.
    ///
    /// # Panics
    ///
    /// If `json` is not a JSON object, or is too large (see
    /// [`FakeHost::set_settings`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.set_settings_json(r#"{ "regions": ["eu", "us"] }"#);
    /// assert_eq!(leasehold_guest::settings_json(), r#"{"regions":["eu","us"]}"#);
    /// ```
    pub fn set_settings_json(&self, json: &str) {
        let value: serde_json::Value =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("the settings are not JSON: {e}"));
        self.set_settings(&value);
    }

    /// The fake's wall clock: what [`crate::clock::now`] reads. A new fake
    /// starts at 2026-01-01T00:00:00Z, and its clock moves only by
    /// [`FakeHost::set_now`] and [`FakeHost::advance`].
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(host.now(), UNIX_EPOCH + Duration::from_secs(1_767_225_600));
    /// ```
    pub fn now(&self) -> SystemTime {
        self.state.borrow().now
    }

    /// Set the wall clock to `now`, forwards or backwards (a real wall
    /// clock can be stepped back too).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.set_now(UNIX_EPOCH + Duration::from_secs(60));
    /// assert_eq!(leasehold_guest::clock::now(), UNIX_EPOCH + Duration::from_secs(60));
    /// ```
    pub fn set_now(&self, now: SystemTime) {
        self.state.borrow_mut().now = now;
    }

    /// Move the wall clock forward by `by`; returns the new time.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// let before = leasehold_guest::clock::now();
    /// let after = host.advance(Duration::from_millis(1500));
    /// assert_eq!(after.duration_since(before).unwrap(), Duration::from_millis(1500));
    /// ```
    pub fn advance(&self, by: Duration) -> SystemTime {
        let mut state = self.state.borrow_mut();
        state.now += by;
        state.now
    }

    /// The settings' JSON text, for the SDK's `settings` call.
    pub(super) fn settings_text(&self) -> String {
        self.state.borrow().settings.clone()
    }
}

/// A new fake's clock.
pub(super) fn start() -> SystemTime {
    UNIX_EPOCH + START
}
