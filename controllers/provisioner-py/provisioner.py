"""The example provisioner in Python: makes buckets in an external "cloud"
API match the `buckets` objects in the store, over fenced outbound HTTP.
The same job as `controllers/provisioner` (Rust), with the deletion held
by a finalizer and the idempotency keys taken from the generation.

Objects, `buckets/NAME`:

    {"spec": {"size_gb": 10, "region": "eu"}, "endpoint": "http://127.0.0.1:9000"}

`spec` and `endpoint` (the cloud's base URL, which must be in the
controller's `http_allow`) are the user's; every other field of the value
is kept as is. The provisioner writes only the object's **status** part
(status writes never move the generation) and its finalizer:

    {"phase": "Ready", "applied_spec": {...}, "cloud_generation": 1,
     "observed_generation": 2, "incarnation": 1, "message": "...",
     "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", ...}]}

The fenced-receiver rule splits the work with the cloud: the host stamps
every request with the lease and epoch, the cloud refuses an epoch lower
than it accepted (409 `{"error": "stale epoch"}`) and applies each
`Idempotency-Key` once; the provisioner names each effect by a key that a
retry and a successor derive identically.

- **The finalizer.** A bucket object gets the finalizer
  `provisioner/bucket` before anything is sent for it, so a
  delete request only marks it, and the provisioner deletes the bucket at
  the cloud before the object goes (`leasehold.finalizer`).
- **One effect, one key, from the generation.** The `PUT` of a spec is
  keyed `buckets/NAME@GENERATION/put-INCARNATION`: the generation moves
  with the spec (and the metadata), never with a status write, so the
  provisioner records `Pending` before sending and a retry after a lost
  answer still sends the same key: the cloud replays its answer instead
  of applying twice. `INCARNATION` is the object's version when the
  provisioner first wrote its status, kept in the status: generations
  start again at 1 when an object is deleted and created again under the
  same name, and versions are never reused, so a new object never sends
  an old object's key (the cloud would replay the old answer and create
  nothing). A user who clears the status starts a new incarnation: the
  spec is sent once more under a new key.
- **A lost answer is applied once.** After a timeout or a dropped
  connection the provisioner writes nothing more and fails (the host
  retries with backoff); the retry, or the next leader, sends the same key.
- **A stale leader stops.** A 409 "stale epoch" means a newer tenure
  acted at the cloud: the reconcile ends as fenced
  (`leasehold.http.Fenced`), as it does when the host refuses to send
  after the lease is lost.
- **A refusal is recorded, not retried.** Any other 4xx is recorded as
  phase `Failed` (condition `Ready` False, a `Warning` event) and waits
  for a new spec; 5xx, 429 and network failures are retried with backoff
  (or after the cloud's `Retry-After`).
- **Deletion.** Once the object is marked, the provisioner sends `DELETE`
  (key `buckets/NAME@GENERATION/delete-INCARNATION`, the generation of
  the marked object) and on a 2xx or 404 removes its finalizer with a
  `Deprovisioned` event, in one commit: the object goes. A refused delete
  keeps the finalizer (and the object) and is tried again after
  `REFUSED_RETRY_AFTER_MS`.

Malformed objects are skipped with a warning, never fatal (and get no
finalizer). A resync does not call the cloud for buckets in sync.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

import leasehold
from leasehold import (
    Condition,
    ConditionStatus,
    Conflict,
    Context,
    Controller,
    Description,
    IdempotencyKey,
    NotFound,
    Object,
    Outcome,
    Retry,
    Transaction,
    finalizer,
    set_condition,
)
from leasehold.http import Fenced, Request, Response

#: The kind of the bucket objects.
BUCKETS = "buckets"
#: The finalizer that holds a bucket object until the cloud's bucket is gone.
FINALIZER = "provisioner/bucket"
#: The reason of the event recorded when the cloud applied a spec.
PROVISIONED = "Provisioned"
#: The reason of the (warning) event recorded when the cloud refused a spec.
PROVISION_FAILED = "ProvisionFailed"
#: The reason of the event recorded when the bucket was deleted at the cloud.
DEPROVISIONED = "Deprovisioned"
#: The condition the provisioner keeps in each bucket's status.
READY = "Ready"
#: The action of the `PUT` in its idempotency key (with the incarnation).
PUT_ACTION = "put"
#: The action of the `DELETE` in its idempotency key (with the incarnation).
DELETE_ACTION = "delete"
#: What a fenced receiver's 409 body says when the epoch is stale.
STALE_EPOCH = "stale epoch"
#: Every bucket is looked at again this often (buckets in sync cost nothing).
RESYNC_PERIOD_MS = 60_000
#: The first-byte timeout asked of the host for each request.
REQUEST_TIMEOUT_MS = 10_000
#: The requeue delay after a status commit conflicted.
CONFLICT_RETRY_AFTER_MS = 200
#: When a delete the cloud refused is tried again (the finalizer stays).
REFUSED_RETRY_AFTER_MS = 300_000
#: Longest status or event message built from a cloud's answer, in bytes.
MAX_MESSAGE_BYTES = 512

PENDING, READY_PHASE, FAILED = "Pending", "Ready", "Failed"


@dataclass(frozen=True)
class BucketSpec:
    """What the user asks for; sent to the cloud as the `PUT` body."""

    size_gb: int
    region: str

    @staticmethod
    def from_value(value: Any) -> "BucketSpec":
        """The spec in `value` (`ValueError` if it is not exactly one)."""
        if not isinstance(value, dict) or set(value) != {"size_gb", "region"}:
            raise ValueError("spec is {size_gb, region}")
        size, region = value["size_gb"], value["region"]
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**32:
            raise ValueError("spec.size_gb is a whole number")
        if not isinstance(region, str):
            raise ValueError("spec.region is a string")
        return BucketSpec(size, region)

    def to_value(self) -> Dict[str, Any]:
        """The spec as JSON."""
        return {"size_gb": self.size_gb, "region": self.region}


def bucket_url(endpoint: Any, name: str) -> str:
    """The URL of bucket `name` at `endpoint`; `ValueError` if the endpoint
    is not an `http`/`https` base URL."""
    if not isinstance(endpoint, str):
        raise ValueError("endpoint is a string")
    base = endpoint.rstrip("/")
    has_scheme = any(
        len(base) > len(scheme) and base[: len(scheme)].lower() == scheme
        for scheme in ("http://", "https://")
    )
    if not has_scheme or "?" in base or "#" in base or any(c.isspace() for c in base):
        raise ValueError(f"endpoint {endpoint!r} is not an http:// or https:// base URL")
    return f"{base}/{BUCKETS}/{name}"


def clip(text: str) -> str:
    """`text` cut to `MAX_MESSAGE_BYTES` bytes of UTF-8, at a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= MAX_MESSAGE_BYTES:
        return text
    return data[: MAX_MESSAGE_BYTES - 3].decode("utf-8", errors="ignore") + "..."


def answer_text(response: Response) -> str:
    """The answer's `error` field, or its text."""
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            return body["error"]
    except leasehold.HttpError:
        pass
    try:
        text = response.text().strip()
    except leasehold.HttpError:
        return "a body that is not text"
    return text or "no body"


def retry_after_ms(response: Response) -> Optional[int]:
    """`Retry-After` in seconds, as milliseconds, bounded to an hour."""
    value = response.header("retry-after")
    if value is None or not value.strip().isdigit():
        return None
    return min(int(value.strip()), 3600) * 1000


def refused(response: Response, url: str) -> None:
    """Raise for an answer that is not a definite refusal of the request:
    a stale epoch (`Fenced`: a newer tenure acted), or one worth retrying
    (5xx, 429, 408, 425, another 409, 1xx/3xx). Return for the other 4xx,
    which refuse the request itself."""
    status = response.status
    if status == 409 and answer_text(response) == STALE_EPOCH:
        raise Fenced(
            f"{url} refused epoch {leasehold.fence().epoch} as stale: a newer tenure has acted"
        )
    if 400 <= status < 500 and status not in (408, 409, 425, 429):
        return
    raise leasehold.Failed(
        clip(f"{url} answered {status}: {answer_text(response)}; retrying"),
        retry_after_ms(response),
    )


class Provisioner(Controller):
    """The provisioner controller."""

    def describe(self) -> Description:
        """Buckets, resynced every minute."""
        return Description.watching([BUCKETS]).resync_every(RESYNC_PERIOD_MS)

    def reconcile(self, ctx: Context, kind: str, name: str) -> Outcome:
        """Provision, or deprovision under the finalizer, one bucket."""
        if kind != BUCKETS:
            leasehold.warn(f"asked to reconcile {kind}/{name}, a kind not watched")
            return Outcome.done()
        bucket = ctx.api(BUCKETS).get(name)
        if bucket is None:
            return Outcome.done()
        try:
            if not isinstance(bucket.value, dict):
                raise ValueError("the value is not an object")
            spec = BucketSpec.from_value(bucket.value.get("spec"))
            url = bucket_url(bucket.value.get("endpoint"), name)
        except ValueError as e:
            # A change to the object wakes us again; retrying the same
            # value would fail the same way.
            leasehold.warn(f"skipping {bucket.key}: {e}")
            return Outcome.done()
        return finalizer(
            bucket,
            FINALIZER,
            lambda b: self.provision(ctx, b, spec, url),
            lambda b: self.deprovision(ctx, b, url),
        )

    def error_policy(self, ctx: Context, kind: str, name: str, error: Exception) -> Retry:
        """Conflicts: look again soon; the cloud's `Retry-After`; else backoff."""
        if isinstance(error, (Conflict, NotFound)):
            return Retry.after(CONFLICT_RETRY_AFTER_MS)
        return super().error_policy(ctx, kind, name, error)

    def provision(self, ctx: Context, bucket: Object, spec: BucketSpec, url: str) -> Outcome:
        """Send the spec (after recording `Pending`) and record what the cloud said."""
        status: Dict[str, Any] = dict(bucket.status) if isinstance(bucket.status, dict) else {}
        if status.get("applied_spec") == spec.to_value():
            return Outcome.done()
        if status.get("phase") == FAILED and status.get("rejected_spec") == spec.to_value():
            return Outcome.done()
        incarnation = status.get("incarnation")
        if not isinstance(incarnation, int) or isinstance(incarnation, bool):
            incarnation = bucket.version
        if status.get("phase") != PENDING or status.get("observed_generation") != bucket.generation:
            status.update(
                phase=PENDING,
                observed_generation=bucket.generation,
                incarnation=incarnation,
                message="sending the spec to the cloud",
            )
            set_condition(
                status,
                Condition(READY, ConditionStatus.UNKNOWN, "Provisioning", "", bucket.generation),
            )
            try:
                committed = Transaction().update_status(bucket, status).commit()
            except (Conflict, NotFound):
                return Outcome.requeue_after(CONFLICT_RETRY_AFTER_MS)
            bucket = dataclasses.replace(bucket, version=committed.revision, status=status)
        key = IdempotencyKey.for_action(
            BUCKETS, bucket.name, bucket.generation, f"{PUT_ACTION}-{incarnation}"
        )
        response = (
            Request.put(url)
            .json(spec.to_value())
            .idempotency_key(key)
            .timeout(REQUEST_TIMEOUT_MS)
            .send()
        )
        epoch = ctx.fence.epoch
        if response.is_success:
            try:
                body = response.json()
            except leasehold.HttpError:
                body = None
            cloud_generation = body.get("generation") if isinstance(body, dict) else None
            replayed = response.header("idempotency-replayed") == "true"
            message = "applied by the cloud{} (epoch {}{})".format(
                "" if cloud_generation is None else f" at generation {cloud_generation}",
                epoch,
                "; the answer to an earlier attempt, replayed" if replayed else "",
            )
            status.update(
                phase=READY_PHASE,
                applied_spec=spec.to_value(),
                cloud_generation=cloud_generation,
                message=message,
            )
            status.pop("rejected_spec", None)
            set_condition(
                status,
                Condition(READY, ConditionStatus.TRUE, PROVISIONED, message, bucket.generation),
            )
            return self.record(bucket, status, PROVISIONED, message, warning=False)
        refused(response, url)
        message = clip(f"the cloud refused the spec with {response.status}: {answer_text(response)}")
        status.update(phase=FAILED, rejected_spec=spec.to_value(), message=message)
        set_condition(
            status,
            Condition(READY, ConditionStatus.FALSE, PROVISION_FAILED, message, bucket.generation),
        )
        leasehold.warn(f"{bucket.key}: {message}")
        return self.record(bucket, status, PROVISION_FAILED, message, warning=True)

    def record(self, bucket: Object, status: Dict[str, Any], reason: str, message: str, warning: bool) -> Outcome:
        """Write `status`, conditional on the generation read, with an event."""
        tx = Transaction().update_status(bucket, status)
        if warning:
            tx.warning(BUCKETS, bucket.name, reason, message)
        else:
            tx.event(BUCKETS, bucket.name, reason, message)
        try:
            tx.commit()
        except (Conflict, NotFound) as e:
            # The spec changed (or the object went) since it was read: what
            # to do is decided again from a fresh read, with a new key.
            leasehold.info(f"{e.key} changed since it was read; looking again")
            return Outcome.requeue_after(CONFLICT_RETRY_AFTER_MS)
        leasehold.info(f"{bucket.key}: {message}")
        return Outcome.done()

    def deprovision(self, ctx: Context, bucket: Object, url: str) -> Transaction:
        """Delete the bucket at the cloud; the `Deprovisioned` event commits
        with the finalizer's removal. Raises to keep the finalizer."""
        status = bucket.status if isinstance(bucket.status, dict) else {}
        incarnation = status.get("incarnation")
        if not isinstance(incarnation, int) or isinstance(incarnation, bool):
            incarnation = bucket.version
        key = IdempotencyKey.for_action(
            BUCKETS, bucket.name, bucket.generation, f"{DELETE_ACTION}-{incarnation}"
        )
        response = Request.delete(url).idempotency_key(key).timeout(REQUEST_TIMEOUT_MS).send()
        if not response.is_success and response.status != 404:
            refused(response, url)
            message = clip(
                f"the cloud refused the delete with {response.status}: {answer_text(response)}"
            )
            leasehold.warn(f"{bucket.key}: {message}; the finalizer stays")
            raise leasehold.Failed(message, REFUSED_RETRY_AFTER_MS)
        message = "deleted at the cloud ({}, epoch {})".format(
            "it was not there" if response.status == 404 else "confirmed", ctx.fence.epoch
        )
        leasehold.info(f"{bucket.key}: {message}")
        return Transaction().event(BUCKETS, bucket.name, DEPROVISIONED, message)
