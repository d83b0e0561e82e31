// One WIT interface, stubbed: each function calls what the test put in
// globalThis.witStubs[<interface>][<function>], and records the call.
// Resource classes (wasi:http's) are stand-ins that construct, and look
// their statics up on, the class the test put under the same name.

const iface = new URL(import.meta.url).searchParams.get('interface');

function stubbed(name) {
  const stubs = globalThis.witStubs ?? {};
  const fn = stubs[iface]?.[name];
  if (fn === undefined) throw new Error(`the test did not stub ${iface} ${name}`);
  return fn;
}

function call(name, args) {
  const fn = stubbed(name);
  (globalThis.witCalls ??= []).push([iface, name, args]);
  return fn(...args);
}

function resource(name) {
  return new Proxy(function () {}, {
    construct: (_target, args) => {
      (globalThis.witCalls ??= []).push([iface, `new ${name}`, args]);
      return new (stubbed(name))(...args);
    },
    get: (_target, prop) => {
      const value = stubbed(name)[prop];
      return typeof value === 'function' ? value.bind(stubbed(name)) : value;
    },
  });
}

export const get = (...args) => call('get', args);
export const list = (...args) => call('list', args);
export const listSelected = (...args) => call('listSelected', args);
export const commit = (...args) => call('commit', args);
export const current = (...args) => call('current', args);
export const shard = (...args) => call('shard', args);
export const log = (...args) => call('log', args);
export const now = (...args) => call('now', args);
export const handle = (...args) => call('handle', args);
export const httpErrorCode = (...args) => call('httpErrorCode', args);
export const Fields = resource('Fields');
export const OutgoingRequest = resource('OutgoingRequest');
export const OutgoingBody = resource('OutgoingBody');
export const RequestOptions = resource('RequestOptions');
