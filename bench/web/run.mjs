// pteron's WebAssembly build vs ONNX Runtime Web (its WASM SIMD backend, one thread) on the
// same model in the same headless Chromium, interleaved: per round, N runs of each engine.
// Prints medians, p90 and the ratio, and each engine's max |output − ExecuTorch's golden|.
// Needs web/build.sh, `npm install` here, and the full MobileNetV2 exports:
//   python tools/export/export_fixtures.py (tools/export/out/mobilenet_v2/model_xnnpack.pte)
//   python bench/bench.py --export mobilenet_v2 0 1 (model.onnx, the same weights)
// Usage: node bench/web/run.mjs [rounds] [runs per round]
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { serve } from '../../web/test/serve.mjs';

const rounds = Number(process.argv[2] ?? 10);
const perRound = Number(process.argv[3] ?? 5);
const server = await serve();
const base = `http://127.0.0.1:${server.address().port}`;
const context = await chromium.launchPersistentContext(
  await mkdtemp(path.join(os.tmpdir(), 'pteron-bench-')),
  {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  },
);
try {
  const page = await context.newPage();
  page.on('console', (m) => console.log(`[page] ${m.text()}`));
  await page.goto(`${base}/bench/web/bench.html`);
  await page.waitForFunction(() => window.ready === true);
  const dir = '/tools/export/out/mobilenet_v2/';
  const r = await page.evaluate(
    (c) => window.bench(c),
    {
      pte: `${dir}model_xnnpack.pte`,
      onnx: `${dir}model.onnx`,
      input: `${dir}input0.npy`,
      golden: `${dir}expected0.npy`,
      rounds,
      perRound,
    },
  );
  const q = (t, p) => [...t].sort((a, b) => a - b)[Math.min(t.length - 1, Math.floor(p * t.length))];
  const version = await page.evaluate(() => navigator.userAgent);
  console.log(`MobileNetV2 (1×3×224×224, fp32), ${rounds} rounds × ${perRound} runs, one thread, ${version}`);
  console.log('| engine | median ms | p90 ms | min ms | max abs diff vs ExecuTorch |');
  console.log('|---|---|---|---|---|');
  for (const [name, v] of Object.entries(r)) {
    console.log(`| ${name} | ${q(v.times, 0.5).toFixed(2)} | ${q(v.times, 0.9).toFixed(2)} | ${Math.min(...v.times).toFixed(2)} | ${v.maxAbsDiff.toExponential(2)} |`);
  }
  console.log(`pteron / ORT Web (medians): ${(q(r.pteron.times, 0.5) / q(r.ort.times, 0.5)).toFixed(2)}`);
} finally {
  await context.close();
  server.close();
}
