"""{{name}}: a Leasehold controller. It greets: every `greetings` object
(`{"name": "world"}`) gets the status `{"message": "Hello, world!",
"observed_generation": N}` and a `Greeted` event, in one fenced commit.

Replace the greeting with your own reconcile; keep its shape: read, decide
from what the store holds (never from memory), write once, and do nothing
when there is nothing to do. A successor may run it again after a crash.
"""

from dataclasses import dataclass

import leasehold
from leasehold import (
    DEFAULT_CONFLICT_ATTEMPTS,
    Context,
    Controller,
    Description,
    Outcome,
    Transaction,
    retry_on_conflict,
)

#: The kind the controller watches.
GREETINGS = "greetings"

#: How often every greeting is looked at again, changed or not.
RESYNC_MS = 300_000


@dataclass
class Settings:
    """`[controllers.settings]` in leasehold.toml."""

    greeting: str = "Hello"


class Greeter(Controller):
    """The controller. It keeps no state: everything it needs is in the store."""

    def describe(self) -> Description:
        return Description.watching([GREETINGS]).resync_every(RESYNC_MS)

    def reconcile(self, ctx: Context, kind: str, name: str) -> Outcome:
        settings = leasehold.settings(Settings)

        def attempt() -> Outcome:
            greeting = ctx.api(GREETINGS).get(name)
            if greeting is None:
                return Outcome.done()
            who = (greeting.value or {}).get("name") or "world"
            wanted = {
                "message": f"{settings.greeting}, {who}!",
                # The generation of the value the message was made from: a
                # status write does not move it, a change of the value does.
                "observed_generation": greeting.generation,
            }
            if greeting.status == wanted:
                return Outcome.done()
            # Conditional on the generation read; fenced by the lease.
            (
                Transaction()
                .update_status(greeting, wanted)
                .event(GREETINGS, name, "Greeted", wanted["message"])
                .commit()
            )
            return Outcome.done()

        # Changed between the read and the commit: read and decide again.
        return retry_on_conflict(DEFAULT_CONFLICT_ATTEMPTS, attempt)
