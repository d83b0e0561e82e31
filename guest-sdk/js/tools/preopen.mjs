// Loaded with `node --import` before `jco types`: gives the WebAssembly
// build of jco's WIT tooling the host's file system. The WASI shim jco
// 1.35.0 runs it with (preview2-shim 0.26) starts with no preopened
// directories, so without this `jco types` cannot read the WIT folder.
// The tool folder is the one cargo xtask installs (LEASEHOLD_JS_TOOLS).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const tools = process.env.LEASEHOLD_JS_TOOLS;
if (!tools) throw new Error('LEASEHOLD_JS_TOOLS must name the JavaScript tool folder');
const shims = [
  'node_modules/@bytecodealliance/jco-transpile/node_modules/@bytecodealliance/preview2-shim',
  'node_modules/@bytecodealliance/preview2-shim',
];
for (const shim of shims) {
  const fs = join(tools, shim, 'dist/nodejs/filesystem.js');
  if (existsSync(fs)) {
    const { _setPreopens } = await import(pathToFileURL(fs).href);
    _setPreopens({ '/': '/' });
  }
}
