// {{name}}: a Leasehold controller. It greets: every `greetings` object
// (`{"name": "world"}`) gets the status `{"message": "Hello, world!",
// "observed_generation": N}` and a `Greeted` event, in one fenced commit.
//
// Replace the greeting with your own reconcile; keep its shape: read,
// decide from what the store holds (never from memory), write once, and do
// nothing when there is nothing to do. A successor may run it again after
// a crash.

import {
  Controller,
  DEFAULT_CONFLICT_ATTEMPTS,
  Description,
  Outcome,
  Transaction,
  retryOnConflict,
  settings,
} from './vendor/leasehold/index.js';

/** The kind the controller watches. */
export const GREETINGS = 'greetings';

/** How often every greeting is looked at again, changed or not. */
const RESYNC_MS = 300_000;

/** The controller. It keeps no state: everything it needs is in the store. */
export class Greeter extends Controller {
  describe() {
    return Description.watching([GREETINGS]).resyncEvery(RESYNC_MS);
  }

  reconcile(ctx, kind, name) {
    // `[controllers.settings]` in leasehold.toml; a wrong type is an error
    // naming the key.
    const { greeting } = settings((data, reader) => ({ greeting: reader.string('greeting', 'Hello') }));
    // Changed between the read and the commit: read and decide again.
    return retryOnConflict(DEFAULT_CONFLICT_ATTEMPTS, () => {
      const object = ctx.api(GREETINGS).get(name);
      if (object === null) return Outcome.done();
      const who = object.value?.name ?? 'world';
      const wanted = {
        message: `${greeting}, ${who}!`,
        // The generation of the value the message was made from: a status
        // write does not move it, a change of the value does.
        observed_generation: object.generation,
      };
      if (object.status?.message === wanted.message && object.status?.observed_generation === wanted.observed_generation) {
        return Outcome.done();
      }
      // Conditional on the generation read; fenced by the lease.
      new Transaction().updateStatus(object, wanted).event(GREETINGS, name, 'Greeted', wanted.message).commit();
      return Outcome.done();
    });
  }
}
