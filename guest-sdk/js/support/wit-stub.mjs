// One WIT interface, stubbed: each function calls what the test put in
// globalThis.witStubs[<interface>][<function>], and records the call.

const iface = new URL(import.meta.url).searchParams.get('interface');

function call(name, args) {
  const stubs = globalThis.witStubs ?? {};
  const fn = stubs[iface]?.[name];
  if (fn === undefined) throw new Error(`the test did not stub ${iface} ${name}`);
  (globalThis.witCalls ??= []).push([iface, name, args]);
  return fn(...args);
}

export const get = (...args) => call('get', args);
export const list = (...args) => call('list', args);
export const listSelected = (...args) => call('listSelected', args);
export const commit = (...args) => call('commit', args);
export const current = (...args) => call('current', args);
export const shard = (...args) => call('shard', args);
export const log = (...args) => call('log', args);
export const now = (...args) => call('now', args);
