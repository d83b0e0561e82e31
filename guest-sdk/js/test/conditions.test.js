// Conditions (metav1.Condition on the wire every SDK reads) and typed
// events (the type carried in the message, as every SDK carries it).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  Api,
  Condition,
  ConditionStatus,
  EventType,
  Transaction,
  decodeEventMessage,
  encodeEventMessage,
  formatTime,
  getCondition,
  parseTime,
  removeCondition,
  setCondition,
} from '../src/index.js';
import { FakeHost } from '../src/fake.js';

test('a condition has the wire names of every SDK', () => {
  const host = new FakeHost(); // its clock starts at 2026-01-01T00:00:00Z
  host.advance(1_999);
  const ready = new Condition({
    type: 'Ready',
    status: ConditionStatus.FALSE,
    reason: 'Refused',
    message: 'region is full',
    observedGeneration: 7,
  });
  const wire = {
    type: 'Ready',
    status: 'False',
    reason: 'Refused',
    message: 'region is full',
    observed_generation: 7,
    last_transition_time: '2026-01-01T00:00:01Z',
  };
  assert.deepEqual(JSON.parse(JSON.stringify(ready)), wire, 'to the second, the fraction cut');
  assert.deepEqual(Condition.fromJSON(wire), ready);
  // Written elsewhere, with an offset and without the optional parts.
  const read = Condition.fromJSON({
    type: 'Ready',
    status: 'Unknown',
    reason: 'Waiting',
    last_transition_time: '2026-01-01T01:00:00+01:00',
  });
  assert.deepEqual([read.message, read.observedGeneration, read.lastTransitionTime.toISOString()], ['', 0, '2026-01-01T00:00:00.000Z']);
  assert.throws(() => Condition.fromJSON({ ...wire, status: 'Maybe' }), TypeError);
  assert.throws(() => Condition.fromJSON({ ...wire, last_transition_time: 'yesterday' }), TypeError);
});

test('RFC 3339 times are written in UTC to the second and read with any offset and fraction', () => {
  assert.equal(formatTime(new Date(0)), '1970-01-01T00:00:00Z');
  assert.equal(formatTime(new Date(Date.UTC(2000, 1, 29))), '2000-02-29T00:00:00Z');
  assert.equal(formatTime(new Date(Date.UTC(2026, 0, 1, 0, 0, 0, 999))), '2026-01-01T00:00:00Z');
  assert.equal(formatTime(new Date(-1)), '1969-12-31T23:59:59Z');
  const newYear = Date.UTC(2026, 0, 1);
  for (const text of ['2026-01-01T00:00:00Z', '2026-01-01t00:00:00z', '2026-01-01T02:00:00+02:00', '2025-12-31T19:30:00-04:30']) {
    assert.equal(parseTime(text)?.getTime(), newYear, text);
  }
  assert.equal(parseTime('2026-01-01T00:00:00.25Z')?.getTime(), newYear + 250);
  assert.equal(parseTime('0099-01-01T00:00:00Z')?.getUTCFullYear(), 99, 'not 1999');
  for (const bad of [
    '',
    '2026-01-01',
    '2026-01-01T00:00:00',
    '2026-01-01 00:00:00Z',
    '2026-02-29T00:00:00Z',
    '2026-13-01T00:00:00Z',
    '2026-01-01T24:00:00Z',
    '2026-01-01T00:00:00.Z',
    '2026-01-01T00:00:00+0200',
    '2026-01-01T00:00:00Zjunk',
    '２026-01-01T00:00:00Z',
  ]) {
    assert.equal(parseTime(bad), null, bad);
  }
});

test('the transition time moves only when the status changes, from the SDK’s clock', () => {
  const host = new FakeHost();
  const started = host.now();
  const status = { phase: 'Pending' };
  const pending = { type: 'Ready', status: ConditionStatus.UNKNOWN, reason: 'Provisioning' };
  assert.ok(setCondition(status, pending));
  assert.ok(!setCondition(status, pending), 'nothing changed');
  // Later, the same status with a new message: the time stays.
  host.advance(30_000);
  assert.ok(setCondition(status, { ...pending, message: 'still waiting', observedGeneration: 2 }));
  assert.deepEqual(getCondition(status, 'Ready')?.lastTransitionTime, started);
  // A new status: the time moves to now, whatever time the condition carried.
  host.advance(30_000);
  const ready = new Condition({ type: 'Ready', status: ConditionStatus.TRUE, reason: 'Provisioned', lastTransitionTime: new Date(0) });
  assert.ok(setCondition(status, ready));
  assert.deepEqual(getCondition(status, 'Ready')?.lastTransitionTime, host.now());
  assert.ok(getCondition(status, 'Ready')?.isTrue);
  assert.equal(status.conditions.length, 1, 'one condition per type');
  assert.deepEqual(status.conditions[0], {
    type: 'Ready',
    status: 'True',
    reason: 'Provisioned',
    message: '',
    observed_generation: 0,
    last_transition_time: '2026-01-01T00:01:00Z',
  });
  assert.equal(status.phase, 'Pending', 'the rest of the status is kept');
});

test('conditions of several types, read back from the store, removed', () => {
  const host = new FakeHost();
  host.seed('buckets', 'b', { size: 1 });
  const obj = new Api('buckets').get('b');
  const status = obj.status ?? {};
  setCondition(status, { type: 'Ready', status: 'True', reason: 'Done', observedGeneration: obj.generation });
  setCondition(status, { type: 'Degraded', status: 'True', reason: 'Slow', message: 'p99 over 1 s' });
  new Transaction().updateStatus(obj, status).commit();
  const stored = new Api('buckets').get('b').status;
  assert.deepEqual(Object.keys(stored.conditions[0]).sort(), [
    'last_transition_time',
    'message',
    'observed_generation',
    'reason',
    'status',
    'type',
  ]);
  assert.equal(getCondition(stored, 'Ready')?.observedGeneration, 1);
  assert.equal(getCondition(stored, 'Degraded')?.message, 'p99 over 1 s');
  assert.equal(getCondition(stored, 'Missing'), null);
  assert.equal(getCondition(null, 'Ready'), null);
  assert.ok(removeCondition(stored, 'Degraded'));
  assert.ok(!removeCondition(stored, 'Degraded'));
  assert.deepEqual(stored.conditions.map((c) => c.type), ['Ready']);
  assert.ok(!removeCondition({}, 'Ready'));
  assert.throws(() => setCondition(null, { type: 'Ready', status: 'True', reason: 'X' }), TypeError);
  assert.throws(() => setCondition({}, { type: 'Ready', status: 'Yes', reason: 'X' }), TypeError);
  assert.throws(() => setCondition({ conditions: 'no' }, { type: 'Ready', status: 'True', reason: 'X' }), TypeError);
});

test('an event’s type travels in its message, as in every SDK', () => {
  assert.equal(EventType.Normal, 'Normal');
  assert.equal(EventType.Warning, 'Warning');
  assert.equal(encodeEventMessage(EventType.Warning, 'disk full'), 'Warning: disk full');
  assert.equal(encodeEventMessage(EventType.Normal, 'all good'), 'all good');
  assert.deepEqual(decodeEventMessage('Warning: disk full'), ['Warning', 'disk full']);
  assert.deepEqual(decodeEventMessage('all good'), ['Normal', 'all good']);
  // A normal message that looks like a typed one is kept normal.
  for (const text of ['Warning: is a word', 'Normal: too']) {
    const odd = encodeEventMessage(EventType.Normal, text);
    assert.equal(odd, `Normal: ${text}`);
    assert.deepEqual(decodeEventMessage(odd), ['Normal', text]);
  }
  assert.throws(() => encodeEventMessage('Error', 'x'), TypeError);

  const host = new FakeHost();
  new Transaction()
    .event('tasks', 'a', 'Seen', 'seen it')
    .warning('tasks', 'a', 'Stuck', 'no node fits')
    .eventOfType('tasks', 'a', EventType.Normal, 'Odd', 'Warning: not really')
    .commit();
  assert.deepEqual(
    host.events().map((e) => [e.reason, e.message, e.type, e.text]),
    [
      ['Seen', 'seen it', 'Normal', 'seen it'],
      ['Stuck', 'Warning: no node fits', 'Warning', 'no node fits'],
      ['Odd', 'Normal: Warning: not really', 'Normal', 'Warning: not really'],
    ],
  );
});
