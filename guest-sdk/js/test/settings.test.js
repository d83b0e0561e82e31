// Settings errors name the key they are about (as a path), never a value.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SettingsError, SettingsReader, settings } from '../src/index.js';
import { FakeHost } from '../src/fake.js';

const decode = (_data, s) => ({
  region: s.string('region'),
  maxTasks: s.integer('max_tasks', 10),
  exempt: s.strings('exempt', []),
  port: s.section('db', true).integer('port', 5432),
  debug: s.boolean('debug', false),
});

/** The SettingsError `decode` throws for `given`, checked not to quote `secret`. */
function failure(given, secret) {
  new FakeHost().setSettings(given);
  let caught = null;
  try {
    settings(decode);
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof SettingsError, String(caught));
  assert.ok(!caught.message.includes(secret), caught.message);
  return caught;
}

test('settings read through the reader, with fallbacks', () => {
  const host = new FakeHost();
  host.setSettings({ region: 'eu' });
  assert.deepEqual(settings(decode), { region: 'eu', maxTasks: 10, exempt: [], port: 5432, debug: false });
  host.setSettings({ region: 'us', max_tasks: 3, exempt: ['ops'], db: { port: 6432 }, debug: true });
  assert.deepEqual(settings(decode), { region: 'us', maxTasks: 3, exempt: ['ops'], port: 6432, debug: true });
});

test('a missing key is named', () => {
  const e = failure({ token: 's3cret' }, 's3cret');
  assert.equal(e.key, 'region');
  assert.equal(e.problem, 'missing');
  assert.equal(e.message, "the controller's settings do not have the expected shape: key `region`: missing");
});

test('a value of the wrong type is named by its key and described by its type', () => {
  const cases = [
    [{ region: 7 }, 'region', 'a whole number, expected a string'],
    [{ region: 'eu', max_tasks: 's3cret' }, 'max_tasks', 'a string, expected a whole number'],
    [{ region: 'eu', max_tasks: 2.5 }, 'max_tasks', 'a number with a fraction, expected a whole number'],
    [{ region: 'eu', exempt: ['ops', 's3cret'.length, 'x'] }, 'exempt[1]', 'a whole number, expected a string'],
    [{ region: 'eu', exempt: 's3cret' }, 'exempt', 'a string, expected a list of strings'],
    [{ region: 'eu', db: { port: 's3cret' } }, 'db.port', 'a string, expected a whole number'],
    [{ region: 'eu', db: ['s3cret'] }, 'db', 'a list, expected a table'],
    [{ region: 'eu', debug: 'yes' }, 'debug', 'a string, expected a boolean'],
  ];
  for (const [given, key, problem] of cases) {
    const e = failure(given, 's3cret');
    assert.deepEqual([e.key, e.problem], [key, problem], JSON.stringify(given));
  }
});

test("an error of the decoder's own keeps only its type, or its key when it names one", () => {
  const host = new FakeHost();
  host.setSettings({ region: 'eu', token: 's3cret' });
  assert.throws(
    () =>
      settings((d) => {
        throw new TypeError(`bad token ${d.token}`);
      }),
    (e) => e instanceof SettingsError && e.key === null && e.message.endsWith(': TypeError') && !e.message.includes('s3cret'),
  );
  assert.throws(
    () =>
      settings(() => {
        throw new SettingsError('too short', 'token');
      }),
    (e) => e instanceof SettingsError && e.key === 'token' && e.message.endsWith('key `token`: too short'),
  );
  const reader = new SettingsReader({ a: { b: {} } });
  assert.equal(reader.section('a').section('b').pathOf('c'), 'a.b.c');
  assert.ok(reader.has('a') && !reader.has('z'));
});
