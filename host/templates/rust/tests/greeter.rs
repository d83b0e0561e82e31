//! The greeter against the SDK's fake host: the real store's rules, faults
//! on demand, no host and no Wasm. `cargo test` runs it natively.

use leasehold_guest::{FakeHost, Fault, Reply};
use serde_json::json;
use {{crate}}::{GREETINGS, Greeted, Greeter};

fn status(host: &FakeHost, name: &str) -> Option<Greeted> {
    host.object::<serde_json::Value>(GREETINGS, name)
        .expect("the greeting exists")
        .status()
        .expect("a status the greeter wrote")
}

#[test]
fn greets_once() {
    let host = FakeHost::new();
    host.seed(GREETINGS, "world", &json!({ "name": "world" }));

    assert_eq!(host.reconcile(&Greeter, GREETINGS, "world"), Reply::Done);
    assert_eq!(
        status(&host, "world"),
        Some(Greeted {
            message: "Hello, world!".into(),
            observed_generation: 1
        })
    );
    // Nothing left to do: a second reconcile writes nothing.
    let commits = host.commits().len();
    assert_eq!(host.reconcile(&Greeter, GREETINGS, "world"), Reply::Done);
    assert_eq!(host.commits().len(), commits);
    assert_eq!(host.events_with_reason("Greeted").len(), 1);
}

#[test]
fn a_changed_name_is_greeted_again() {
    let host = FakeHost::new();
    host.seed(GREETINGS, "world", &json!({ "name": "world" }));
    assert_eq!(host.reconcile(&Greeter, GREETINGS, "world"), Reply::Done);
    host.seed(GREETINGS, "world", &json!({ "name": "everyone" }));

    assert_eq!(host.reconcile(&Greeter, GREETINGS, "world"), Reply::Done);
    let greeted = status(&host, "world").expect("greeted");
    assert_eq!(greeted.message, "Hello, everyone!");
    assert_eq!(greeted.observed_generation, 2);
}

#[test]
fn the_greeting_comes_from_the_settings() {
    let host = FakeHost::new();
    host.set_settings(&json!({ "greeting": "Hi" }));
    host.seed(GREETINGS, "team", &json!({ "name": "team" }));

    assert_eq!(host.reconcile(&Greeter, GREETINGS, "team"), Reply::Done);
    assert_eq!(status(&host, "team").expect("greeted").message, "Hi, team!");
}

#[test]
fn a_mistyped_setting_is_named() {
    let host = FakeHost::new();
    host.set_settings(&json!({ "greting": "Hi" }));
    host.seed(GREETINGS, "team", &json!({ "name": "team" }));

    let reply = host.reconcile(&Greeter, GREETINGS, "team");
    assert!(
        matches!(&reply, Reply::Failed { message, .. } if message.contains("greting")),
        "{reply:?}"
    );
    assert!(host.commits().is_empty());
}

#[test]
fn a_lost_lease_writes_nothing() {
    let host = FakeHost::new();
    host.seed(GREETINGS, "world", &json!({ "name": "world" }));
    host.fail_next_commit(Fault::Fenced);

    assert_eq!(host.reconcile(&Greeter, GREETINGS, "world"), Reply::Fenced);
    assert!(host.commits().is_empty());
    assert_eq!(status(&host, "world"), None);
}
