//! {{name}}: a Leasehold controller. It greets: every `greetings` object
//! (`{"name": "world"}`) gets the status `{"message": "Hello, world!",
//! "observed_generation": N}` and a `Greeted` event, in one fenced commit.
//!
//! Replace the greeting with your own reconcile; keep its shape: read,
//! decide from what the store holds (never from memory), write once, and
//! do nothing when there is nothing to do. A successor may run it again
//! after a crash.

use std::time::Duration;

use leasehold_guest::{
    Api, Context, Controller, DEFAULT_CONFLICT_ATTEMPTS, Description, Error, Outcome,
    Transaction, retry_on_conflict,
};
use serde::{Deserialize, Serialize};

/// The kind the controller watches.
pub const GREETINGS: &str = "greetings";

/// How often every greeting is looked at again, changed or not.
const RESYNC: Duration = Duration::from_secs(300);

/// A greeting's value: who to greet (absent: the world).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Greeting {
    #[serde(default)]
    pub name: Option<String>,
}

/// What the controller records in a greeting's status part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Greeted {
    pub message: String,
    /// The generation of the value the message was made from: a status
    /// write does not move it, a change of the value does.
    pub observed_generation: u64,
}

/// `[controllers.settings]` in leasehold.toml. An unknown key is an error
/// naming the key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default = "hello")]
    pub greeting: String,
}

fn hello() -> String {
    "Hello".to_string()
}

/// The controller. It keeps no state: everything it needs is in the store.
#[derive(Debug, Default)]
pub struct Greeter;

leasehold_guest::export_controller!(Greeter);

impl Controller for Greeter {
    fn describe(&self) -> Description {
        Description::watching([GREETINGS]).resync_every(RESYNC)
    }

    fn reconcile(&self, _ctx: &Context, _kind: &str, name: &str) -> Result<Outcome, Error> {
        let settings: Settings = leasehold_guest::settings()?;
        let greetings = Api::<Greeting>::new(GREETINGS);
        // Changed between the read and the commit: read and decide again.
        retry_on_conflict(DEFAULT_CONFLICT_ATTEMPTS, || {
            let Some(greeting) = greetings.get(name)? else {
                return Ok(Outcome::Done);
            };
            let who = greeting.value.name.as_deref().unwrap_or("world");
            let wanted = Greeted {
                message: format!("{}, {who}!", settings.greeting),
                observed_generation: greeting.generation,
            };
            if greeting.status::<Greeted>()?.as_ref() == Some(&wanted) {
                return Ok(Outcome::Done);
            }
            // Conditional on the generation read; fenced by the lease.
            Transaction::new()
                .update_status(&greeting, &wanted)
                .event(GREETINGS, name, "Greeted", wanted.message.as_str())
                .commit()?;
            Ok(Outcome::Done)
        })
    }
}
