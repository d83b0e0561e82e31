"""The greeter against the SDK's fake host: the real store's rules, faults
on demand, no host and no Wasm. `python3 -m pytest` runs it natively."""

from leasehold.fake import FakeHost, Fault

from controller import GREETINGS, Greeter


def status(host, name):
    return host.object(GREETINGS, name).status


def test_greets_once():
    host = FakeHost()
    host.seed(GREETINGS, "world", {"name": "world"})

    assert host.reconcile(Greeter(), GREETINGS, "world").kind == "done"
    assert status(host, "world") == {"message": "Hello, world!", "observed_generation": 1}
    # Nothing left to do: a second reconcile writes nothing.
    commits = len(host.commits())
    assert host.reconcile(Greeter(), GREETINGS, "world").kind == "done"
    assert len(host.commits()) == commits
    assert len(host.events_with_reason("Greeted")) == 1


def test_a_changed_name_is_greeted_again():
    host = FakeHost()
    host.seed(GREETINGS, "world", {"name": "world"})
    host.reconcile(Greeter(), GREETINGS, "world")
    host.seed(GREETINGS, "world", {"name": "everyone"})

    assert host.reconcile(Greeter(), GREETINGS, "world").kind == "done"
    assert status(host, "world") == {"message": "Hello, everyone!", "observed_generation": 2}


def test_the_greeting_comes_from_the_settings():
    host = FakeHost()
    host.set_settings({"greeting": "Hi"})
    host.seed(GREETINGS, "team", {"name": "team"})

    host.reconcile(Greeter(), GREETINGS, "team")
    assert status(host, "team")["message"] == "Hi, team!"


def test_a_mistyped_setting_is_named():
    host = FakeHost()
    host.set_settings({"greeting": 42})
    host.seed(GREETINGS, "team", {"name": "team"})

    reply = host.reconcile(Greeter(), GREETINGS, "team")
    assert reply.is_failed
    assert "greeting" in reply.message
    assert host.commits() == []


def test_a_lost_lease_writes_nothing():
    host = FakeHost()
    host.seed(GREETINGS, "world", {"name": "world"})
    host.fail_next_commit(Fault.FENCED)

    assert host.reconcile(Greeter(), GREETINGS, "world").is_fenced
    assert host.commits() == []
    assert status(host, "world") is None
