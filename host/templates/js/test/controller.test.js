// The greeter against the SDK's fake host: the real store's rules, faults
// on demand, no host and no Wasm. `node --test` runs it natively.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Reply } from '../vendor/leasehold/index.js';
import { Fault, FakeHost } from '../vendor/leasehold/fake.js';
import { GREETINGS, Greeter } from '../controller.js';

const status = (host, name) => host.object(GREETINGS, name).status;

test('greets once', () => {
  const host = new FakeHost();
  host.seed(GREETINGS, 'world', { name: 'world' });

  assert.deepEqual(host.reconcile(new Greeter(), GREETINGS, 'world'), Reply.done());
  assert.deepEqual(status(host, 'world'), { message: 'Hello, world!', observed_generation: 1 });
  // Nothing left to do: a second reconcile writes nothing.
  const commits = host.commits().length;
  assert.deepEqual(host.reconcile(new Greeter(), GREETINGS, 'world'), Reply.done());
  assert.equal(host.commits().length, commits);
  assert.equal(host.eventsWithReason('Greeted').length, 1);
});

test('a changed name is greeted again', () => {
  const host = new FakeHost();
  host.seed(GREETINGS, 'world', { name: 'world' });
  host.reconcile(new Greeter(), GREETINGS, 'world');
  host.seed(GREETINGS, 'world', { name: 'everyone' });

  assert.deepEqual(host.reconcile(new Greeter(), GREETINGS, 'world'), Reply.done());
  assert.deepEqual(status(host, 'world'), { message: 'Hello, everyone!', observed_generation: 2 });
});

test('the greeting comes from the settings', () => {
  const host = new FakeHost();
  host.setSettings({ greeting: 'Hi' });
  host.seed(GREETINGS, 'team', { name: 'team' });

  host.reconcile(new Greeter(), GREETINGS, 'team');
  assert.equal(status(host, 'team').message, 'Hi, team!');
});

test('a mistyped setting is named', () => {
  const host = new FakeHost();
  host.setSettings({ greeting: 42 });
  host.seed(GREETINGS, 'team', { name: 'team' });

  const reply = host.reconcile(new Greeter(), GREETINGS, 'team');
  assert.ok(reply.isFailed, `${reply.kind}`);
  assert.match(reply.message, /greeting/);
  assert.deepEqual(host.commits(), []);
});

test('a lost lease writes nothing', () => {
  const host = new FakeHost();
  host.seed(GREETINGS, 'world', { name: 'world' });
  host.failNextCommit(Fault.FENCED);

  assert.deepEqual(host.reconcile(new Greeter(), GREETINGS, 'world'), Reply.fenced());
  assert.deepEqual(host.commits(), []);
  assert.equal(status(host, 'world'), null);
});
