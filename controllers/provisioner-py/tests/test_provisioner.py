"""The Python provisioner against the SDK's fake host, whose outbound HTTP is
answered by a small fenced receiver written here (the real one is
`leasehold-receiver`)."""

import pytest

from leasehold import ConditionStatus, EventType, Metadata, Reply, get_condition
from leasehold.fake import At, FakeHost, Fault, HttpFault, HttpRecord, HttpReply
from leasehold.http import Method
from provisioner import (
    BUCKETS,
    CONFLICT_RETRY_AFTER_MS,
    DEPROVISIONED,
    FINALIZER,
    PROVISION_FAILED,
    PROVISIONED,
    READY,
    REFUSED_RETRY_AFTER_MS,
    RESYNC_PERIOD_MS,
    Provisioner,
    bucket_url,
    clip,
)

ENDPOINT = "http://cloud.test:9000"
URL = f"{ENDPOINT}/buckets/photos"


class Cloud:
    """A fenced receiver in miniature: the highest epoch accepted per lease
    (409 "stale epoch" below it), answers stored by idempotency key (a key
    reused for another method or body is 422), and the buckets it holds."""

    def __init__(self):
        self.highest = {}
        self.answers = {}
        #: (method, epoch, key) of each effect applied, in order.
        self.applied = []
        self.buckets = {}
        self.generation = 0

    def answer(self, request: HttpRecord) -> HttpReply:
        lease = request.header("leasehold-lease")
        epoch = int(request.header("leasehold-epoch"))
        highest = self.highest.get(lease, 0)
        if epoch < highest:
            return HttpReply.json(409, {"error": "stale epoch", "highest": highest})
        key = request.header("idempotency-key")
        if key is None:
            return HttpReply.json(400, {"error": "idempotency-key is missing"})
        self.highest[lease] = epoch
        if key in self.answers:
            method, body, stored = self.answers[key]
            if (method, body) != (request.method, request.body):
                return HttpReply.json(422, {"error": "key reused for another request"})
            return stored.header("idempotency-replayed", "true")
        name = request.url.rsplit("/", 1)[1]
        self.generation += 1
        if request.method is Method.PUT:
            self.buckets[name] = request.body_json()
            reply = HttpReply.json(201, {"name": name, "spec": request.body_json(), "generation": self.generation})
        elif name in self.buckets:
            del self.buckets[name]
            reply = HttpReply.json(200, {"deleted": True, "generation": self.generation})
        else:
            reply = HttpReply.json(404, {"error": "no bucket"})
        self.applied.append((request.method, epoch, key))
        self.answers[key] = (request.method, request.body, reply)
        return reply


@pytest.fixture
def host():
    return FakeHost()


@pytest.fixture
def cloud(host):
    host.allow_http(f"{ENDPOINT}/buckets/")
    cloud = Cloud()
    host.respond_with(f"{ENDPOINT}/buckets/*", cloud.answer)
    return cloud


def spec(size_gb):
    return {"size_gb": size_gb, "region": "eu"}


def seed(host, size_gb=10):
    return host.seed(BUCKETS, "photos", {"spec": spec(size_gb), "endpoint": ENDPOINT, "owner": "team-a"})


def photos(host):
    return host.object(BUCKETS, "photos")


def reconcile(host):
    return host.reconcile(Provisioner(), BUCKETS, "photos")


def keys(host, method=None):
    return [r.header("idempotency-key") for r in host.http_requests() if method in (None, r.method)]


def test_describes_buckets_with_a_resync():
    d = Provisioner().describe()
    assert d.watches == [BUCKETS] and d.resync_ms == RESYNC_PERIOD_MS


def test_a_new_bucket_is_held_by_the_finalizer_put_once_and_its_status_recorded(host, cloud):
    seed(host)
    assert reconcile(host) == Reply("done")
    bucket = photos(host)
    assert bucket.has_finalizer(FINALIZER)
    [put] = host.http_requests()
    assert (put.method, put.url, put.body_json()) == (Method.PUT, URL, spec(10))
    assert put.header("content-type") == "application/json"
    assert put.header("leasehold-epoch") == "1"
    # Generation 2: the finalizer's addition; incarnation: the version the
    # provisioner first wrote its status at.
    incarnation = bucket.status["incarnation"]
    assert put.header("idempotency-key") == f"buckets/photos@2/put-{incarnation}"
    assert bucket.generation == 2
    status = bucket.status
    assert (status["phase"], status["applied_spec"], status["cloud_generation"]) == ("Ready", spec(10), 1)
    ready = get_condition(status, READY)
    assert (ready.status, ready.reason, ready.observed_generation) == (ConditionStatus.TRUE, PROVISIONED, 2)
    assert bucket.value["owner"] == "team-a", "the value is the user's"
    [event] = host.events_with_reason(PROVISIONED)
    assert event.event_type is EventType.NORMAL
    # Finalizer, Pending, Ready: each conditional on what was read.
    assert len(host.commits()) == 3
    # In sync: the echo of our own commits, or a resync, costs no request.
    assert reconcile(host) == Reply("done")
    assert host.resync(Provisioner())[0][1] == Reply("done")
    assert len(host.http_requests()) == 1 and len(cloud.applied) == 1


def test_a_changed_spec_is_a_new_put_with_a_new_key(host, cloud):
    seed(host)
    reconcile(host)
    changed = dict(photos(host).value, spec=spec(20))
    host.seed(BUCKETS, "photos", changed)
    assert reconcile(host) == Reply("done")
    first, second = keys(host)
    incarnation = photos(host).status["incarnation"]
    assert second == f"buckets/photos@3/put-{incarnation}" and first != second
    assert photos(host).status["applied_spec"] == spec(20)
    assert cloud.buckets["photos"] == spec(20) and len(cloud.applied) == 2


def test_a_lost_answer_is_retried_with_the_same_key_and_applied_once(host, cloud):
    seed(host)
    host.fail_next_http(HttpFault.REPLY_LOST)
    reply = reconcile(host)
    # The cloud applied it, the guest cannot know: it records nothing more
    # and fails, for the host to retry with backoff.
    assert reply.is_failed and reply.delay_ms is None and "connection" in reply.message
    pending = photos(host)
    assert pending.status["phase"] == "Pending"
    assert get_condition(pending.status, READY).status is ConditionStatus.UNKNOWN
    assert len(cloud.applied) == 1
    assert reconcile(host) == Reply("done")
    first, second = keys(host)
    assert first == second, "the retry sends the same key"
    # Writing Pending moved the version (a key from it would have changed),
    # not the generation the key is built from.
    assert photos(host).version > pending.version and photos(host).generation == pending.generation
    assert len(cloud.applied) == 1, "applied exactly once"
    status = photos(host).status
    assert status["phase"] == "Ready" and status["cloud_generation"] == 1
    assert "replayed" in status["message"]


def test_a_successor_completes_a_predecessors_unanswered_put_with_the_same_key(host, cloud):
    seed(host)
    host.fail_next_http(HttpFault.REPLY_TIMED_OUT)
    assert reconcile(host).is_failed
    host.new_tenure()
    assert reconcile(host) == Reply("done")
    sent = host.http_requests()
    assert [r.epoch for r in sent] == [1, 2]
    assert sent[0].header("idempotency-key") == sent[1].header("idempotency-key")
    assert [(m, e) for m, e, _ in cloud.applied] == [(Method.PUT, 1)]
    assert host.commits()[-1].epoch == 2, "the tenure that learned the outcome records it"


def test_a_lease_lost_before_the_request_sends_nothing(host, cloud):
    seed(host)
    host.fail_next_http(HttpFault.FENCED)
    assert reconcile(host) == Reply("fenced")
    assert host.http_requests() == [] and cloud.applied == []
    assert photos(host).status["phase"] == "Pending"


def test_a_lease_lost_at_the_status_commit_stops_and_the_successor_replays(host, cloud):
    seed(host)
    # Commits: the finalizer, Pending, then Ready, which the lease loss strikes.
    host.fail(At.commit(3), Fault.FENCED)
    assert reconcile(host) == Reply("fenced")
    assert len(cloud.applied) == 1 and photos(host).status["phase"] == "Pending"
    host.new_tenure()
    assert reconcile(host) == Reply("done")
    assert len(cloud.applied) == 1 and photos(host).status["phase"] == "Ready"
    first, second = keys(host)
    assert first == second


def test_a_stale_epoch_at_the_cloud_stops_the_guest(host, cloud):
    seed(host)
    cloud.highest["test/controller"] = 5
    assert reconcile(host) == Reply("fenced")
    assert photos(host).status["phase"] == "Pending"
    assert cloud.applied == [] and host.events() == []


def test_deletion_goes_through_the_finalizer_and_a_lost_answer_is_applied_once(host, cloud):
    seed(host)
    reconcile(host)
    host.remove(BUCKETS, "photos")
    marked = photos(host)
    assert marked.is_deleting and marked.has_finalizer(FINALIZER)
    host.fail_next_http(HttpFault.REPLY_LOST)
    assert reconcile(host).is_failed
    assert photos(host).has_finalizer(FINALIZER), "kept while the cleanup failed"
    assert reconcile(host) == Reply("done")
    assert photos(host) is None
    incarnation = marked.status["incarnation"]
    deletes = keys(host, Method.DELETE)
    assert deletes == [f"buckets/photos@{marked.generation}/delete-{incarnation}"] * 2
    assert [m for m, _, _ in cloud.applied] == [Method.PUT, Method.DELETE]
    assert "photos" not in cloud.buckets
    [event] = host.events_with_reason(DEPROVISIONED)
    assert event.event_type is EventType.NORMAL and "confirmed" in event.text
    # The event and the finalizer's removal are one commit.
    assert host.commits()[-1].events[0].reason == DEPROVISIONED


def test_a_bucket_made_again_under_the_same_name_is_a_new_effect(host, cloud):
    seed(host)
    reconcile(host)
    host.remove(BUCKETS, "photos")
    reconcile(host)
    assert photos(host) is None and "photos" not in cloud.buckets
    # The same name and spec again: generations start over, but the key
    # does not repeat the first object's, so the cloud creates it.
    seed(host)
    assert reconcile(host) == Reply("done")
    puts = keys(host, Method.PUT)
    assert len(puts) == 2 and puts[0] != puts[1]
    assert puts[0].startswith("buckets/photos@2/put-") and puts[1].startswith("buckets/photos@2/put-")
    assert cloud.buckets["photos"] == spec(10)
    assert "replayed" not in photos(host).status["message"]


def test_deleting_a_bucket_the_cloud_never_had_still_fences_the_cloud(host):
    host.allow_http(ENDPOINT)
    host.respond(URL, HttpReply.json(404, {"error": "no bucket"}))
    host.seed_with(BUCKETS, "photos", {"spec": spec(1), "endpoint": ENDPOINT}, Metadata().finalizer(FINALIZER))
    host.remove(BUCKETS, "photos")
    assert reconcile(host) == Reply("done")
    [delete] = host.http_requests()
    assert delete.method is Method.DELETE
    assert photos(host) is None
    assert "it was not there" in host.events_with_reason(DEPROVISIONED)[0].text


def test_a_stale_epoch_on_delete_stops_the_guest_and_keeps_the_object(host, cloud):
    seed(host)
    reconcile(host)
    host.remove(BUCKETS, "photos")
    cloud.highest["test/controller"] = 9
    assert reconcile(host) == Reply("fenced")
    assert photos(host).has_finalizer(FINALIZER)


def test_a_refused_delete_keeps_the_finalizer_and_is_tried_again_later(host):
    host.allow_http(ENDPOINT)
    host.respond(URL, HttpReply.json(403, {"error": "bucket is locked"}))
    host.seed_with(BUCKETS, "photos", {"spec": spec(1), "endpoint": ENDPOINT}, Metadata().finalizer(FINALIZER))
    host.remove(BUCKETS, "photos")
    reply = reconcile(host)
    assert reply.is_failed and reply.delay_ms == REFUSED_RETRY_AFTER_MS
    assert "bucket is locked" in reply.message
    assert photos(host).has_finalizer(FINALIZER)


def test_a_refused_spec_is_recorded_with_a_warning_and_waits_for_a_change(host):
    host.allow_http(ENDPOINT)
    host.respond_once(URL, HttpReply.json(400, {"error": "region eu is full"}))
    host.respond(URL, HttpReply.json(200, {"name": "photos", "generation": 1}))
    seed(host)
    assert reconcile(host) == Reply("done")
    status = photos(host).status
    assert (status["phase"], status["rejected_spec"]) == ("Failed", spec(10))
    ready = get_condition(status, READY)
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, PROVISION_FAILED)
    assert "region eu is full" in ready.message
    [event] = host.events_with_reason(PROVISION_FAILED)
    assert event.event_type is EventType.WARNING and "region eu is full" in event.text
    # Not retried while the spec is the one refused.
    assert reconcile(host) == Reply("done")
    assert len(host.http_requests()) == 1
    host.seed(BUCKETS, "photos", dict(photos(host).value, spec=spec(5)))
    assert reconcile(host) == Reply("done")
    status = photos(host).status
    assert status["phase"] == "Ready" and "rejected_spec" not in status
    assert get_condition(status, READY).is_true


def test_server_errors_are_retried_and_retry_after_is_honoured(host):
    host.allow_http(ENDPOINT)
    host.respond_once(URL, HttpReply.text(503, "maintenance"))
    host.respond_once(URL, HttpReply.json(429, {"error": "slow down"}).header("Retry-After", "7"))
    host.respond_once(URL, HttpReply.json(409, {"error": "bucket is being migrated"}))
    seed(host)
    reply = reconcile(host)
    assert reply.is_failed and reply.delay_ms is None and "503" in reply.message and "maintenance" in reply.message
    assert reconcile(host) == Reply("failed", 7000, f"{URL} answered 429: slow down; retrying")
    reply = reconcile(host)
    assert reply.is_failed and "409" in reply.message
    assert len(set(keys(host))) == 1, "every retry of one decision sends one key"
    assert photos(host).status["phase"] == "Pending"


def test_a_status_commit_that_conflicts_requeues_and_looks_again(host, cloud):
    seed(host)
    # The user changes the spec while the PUT is out (before the Ready commit).
    host.before(At.commit(3), lambda h: h.seed(BUCKETS, "photos", {"spec": spec(30), "endpoint": ENDPOINT}))
    assert reconcile(host) == Reply("requeue", CONFLICT_RETRY_AFTER_MS)
    assert photos(host).status["phase"] == "Pending", "nothing recorded from a stale read"
    assert reconcile(host) == Reply("done")
    first, second = keys(host)
    assert first != second
    assert photos(host).status["applied_spec"] == spec(30) and len(cloud.applied) == 2


def test_a_cloud_not_in_http_allow_is_a_failure_and_nothing_is_sent(host):
    seed(host)
    reply = reconcile(host)
    assert reply.is_failed and "http_allow" in reply.message
    assert host.http_requests() == []


def test_absent_and_malformed_objects_are_left_alone(host, cloud):
    assert reconcile(host) == Reply("done")
    host.seed(BUCKETS, "photos", {"spec": {"size_gb": "big"}, "endpoint": ENDPOINT})
    assert reconcile(host) == Reply("done")
    host.seed(BUCKETS, "photos", {"spec": spec(1), "endpoint": "ftp://cloud.test"})
    assert reconcile(host) == Reply("done")
    assert host.http_requests() == [] and host.commits() == []
    assert not photos(host).has_finalizer(FINALIZER)
    warnings = [l.message for l in host.logs() if l.message.startswith("skipping buckets/photos")]
    assert len(warnings) == 2


def test_urls_and_messages():
    assert bucket_url("http://127.0.0.1:9000", "a") == "http://127.0.0.1:9000/buckets/a"
    assert bucket_url("https://cloud.test/v1/", "a") == "https://cloud.test/v1/buckets/a"
    for bad in ["", "http://", "ftp://x", "cloud.test", "http://x?y=1", "http://x y", None]:
        with pytest.raises(ValueError):
            bucket_url(bad, "a")
    clipped = clip("é" * 512)
    assert len(clipped.encode()) <= 512 and clipped.endswith("...")
    assert clip("short") == "short"
