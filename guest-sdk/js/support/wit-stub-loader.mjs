// A module loader hook for the tests (test/component.test.js): the WIT interfaces a component
// imports (`leasehold:controller/...`, `wasi:...`) resolve to
// wit-stub.mjs, one instance per interface, so src/component.js runs
// natively against stubs a test scripts.

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('leasehold:controller/') || specifier.startsWith('wasi:')) {
    const url = new URL('./wit-stub.mjs', import.meta.url);
    url.searchParams.set('interface', specifier);
    return { url: url.href, shortCircuit: true };
  }
  return next(specifier, context);
}
