// The demo page end to end in headless Chromium (Debian's, driven by playwright-core): the
// page loads, the demo's logits equal ExecuTorch's, the VAD demo finds the segments of
// ExecuTorch's probabilities, a malformed program shows an error and the page keeps working.
// Saves screenshots after the demos (docs/web-demo.png and docs/web-vad.png were made so).
// Usage: node web/test/page.mjs [SCREENSHOT.png] (after web/build.sh and npm ci in web/;
// default web/dist/page.png).
import assert from 'node:assert/strict';
import path from 'node:path';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve } from './serve.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const server = await serve();
const base = `http://127.0.0.1:${server.address().port}`;
const userData = await mkdtemp(path.join(os.tmpdir(), 'pteron-chromium-'));
const context = await chromium.launchPersistentContext(userData, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
  ],
});
try {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${base}/web/index.html`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });

  const runDemo = async () => {
    const before = await page.getAttribute('#result', 'data-done');
    await page.click('#demo');
    await page.waitForFunction((b) => document.querySelector('#result').dataset.done !== b, before, {
      timeout: 60000,
    });
  };
  await runDemo();
  assert.equal(await page.textContent('#error'), '');
  const diff = Number(await page.textContent('#maxdiff'));
  assert.ok(diff <= 1e-4, `max abs diff ${diff}`);
  const median = Number(await page.textContent('#median'));
  console.log(`demo in Chromium: max abs diff ${diff}, median ${median} ms`);
  const shot = process.argv[2] ?? path.join(root, 'web/dist/page.png');
  await page.screenshot({ path: shot, fullPage: true });

  // Speech: the bundled clip's segments equal those of ExecuTorch's probabilities.
  const before = await page.getAttribute('#result', 'data-done');
  await page.click('#vad');
  await page.waitForFunction((b) => document.querySelector('#result').dataset.done !== b, before, {
    timeout: 60000,
  });
  assert.equal(await page.textContent('#error'), '');
  const goldens = JSON.parse(await readFile(path.join(root, 'testdata/speech/vad_goldens.json'), 'utf8'));
  const segments = JSON.parse(await page.getAttribute('#segments', 'data-samples'));
  assert.deepEqual(segments, goldens.clips.gaps_16k.segments);
  console.log(`vad in Chromium: ${await page.textContent('#segments')}`);
  await page.screenshot({ path: shot.replace(/\.png$/, '-vad.png'), fullPage: true });

  // A malformed program: an error message, and the page still runs the demo afterwards.
  const junk = path.join(userData, 'junk.pte');
  await writeFile(junk, Buffer.from('this is not an ExecuTorch program'));
  await page.setInputFiles('#pte', junk);
  await page.click('#run');
  await page.waitForFunction(() => document.querySelector('#error').textContent.length > 0, null, {
    timeout: 30000,
  });
  const message = await page.textContent('#error');
  assert.match(message, /PteronError/);
  console.log(`malformed program: ${message}`);
  await runDemo();
  assert.equal(await page.textContent('#error'), '');
  assert.ok(Number(await page.textContent('#maxdiff')) <= 1e-4);
  assert.deepEqual(errors, []);
  console.log('web page tests: ok');
} finally {
  await context.close();
  server.close();
}
