// Every exported item of the SDK is documented: each top-level export,
// and each public method, getter and static of an exported class, follows
// a JSDoc comment.

import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { test } from 'node:test';

const SRC = new URL('../src/', import.meta.url);

/** The lines of `text` that declare something and lack a JSDoc comment just above. */
function undocumented(text) {
  const lines = text.split('\n');
  const missing = [];
  let inExportedClass = false;
  lines.forEach((line, i) => {
    if (/^export class /.test(line)) inExportedClass = true;
    else if (/^\S/.test(line) && !line.startsWith('}')) inExportedClass = false;
    const topLevel = /^export (const|function|class|async function) /.test(line);
    // A member of an exported class: two spaces, then a name (not private,
    // not a constructor, which its class documents) and its parameters.
    const member =
      inExportedClass &&
      /^ {2}(static |get |async )*[A-Za-z_]\w*\s*(\(|=)/.test(line) &&
      !/^ {2}constructor\(/.test(line);
    if (!topLevel && !member) return;
    let j = i - 1;
    while (j >= 0 && lines[j].trim().startsWith('//')) j -= 1;
    if (j < 0 || !lines[j].trim().endsWith('*/')) missing.push(`${i + 1}: ${line.trim()}`);
  });
  return missing;
}

test('every exported item of the SDK is documented', async () => {
  const files = (await readdir(SRC)).filter((f) => f.endsWith('.js'));
  assert.ok(files.length >= 10);
  const missing = [];
  for (const file of files) {
    const text = await readFile(new URL(file, SRC), 'utf8');
    assert.match(text, /^\/\*\*[\s\S]*?@module/, `${file} has no module comment`);
    missing.push(...undocumented(text).map((m) => `${file}:${m}`));
  }
  assert.deepEqual(missing, []);
});

test('the check finds an undocumented export', () => {
  assert.deepEqual(undocumented('/** A. */\nexport const a = 1;\nexport const b = 2;\n'), ['3: export const b = 2;']);
  assert.deepEqual(
    undocumented('/** C. */\nexport class C {\n  /** M. */\n  m() {}\n\n  n() {}\n}\n'),
    ['6: n() {}'],
  );
});
