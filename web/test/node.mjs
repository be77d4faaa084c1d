// The JavaScript package under node, on the module web/build.sh makes: load, inspect and run
// committed fixtures and compare with ExecuTorch's outputs (the same goldens as the Rust
// tests); a malformed program is a PteronError and the module keeps working afterwards.
// Usage: node web/test/node.mjs [web/dist/pteron_c.wasm]
import { readFile } from 'node:fs/promises';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Pteron, PteronError } from '../pteron.mjs';
import { readNpy } from '../npy.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const wasm = process.argv[2] ?? path.join(root, 'web/dist/pteron_c.wasm');
const pt = await Pteron.load(await readFile(wasm));
console.log(`pteron ${pt.version()}`);

function maxAbsDiff(a, b) {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// Fixture directories: model.pte, input*.npy, expected*.npy (ExecuTorch's outputs).
async function check(dir, atol) {
  const d = path.join(root, 'testdata', dir);
  const meta = JSON.parse(await readFile(path.join(d, 'meta.json'), 'utf8'));
  const program = pt.loadProgram(await readFile(path.join(d, 'model.pte')));
  assert.ok(program.methodNames.includes('forward'), `${dir}: methods ${program.methodNames}`);
  const method = program.loadMethod('forward');
  const nIn = method.inputs.length;
  const inputs = [];
  for (let i = 0; i < nIn; i++) inputs.push(readNpy(await readFile(path.join(d, `input${i}.npy`))));
  inputs.forEach((t, i) => {
    assert.deepEqual(method.inputs[i].shape, t.shape, `${dir}: input ${i} shape`);
    assert.equal(method.inputs[i].dtype, t.dtype, `${dir}: input ${i} dtype`);
  });
  const t0 = performance.now();
  const outputs = method.run(inputs);
  const ms = performance.now() - t0;
  let worst = 0;
  for (let i = 0; i < outputs.length; i++) {
    const want = readNpy(await readFile(path.join(d, `expected${i}.npy`)));
    assert.deepEqual(outputs[i].shape, want.shape, `${dir}: output ${i} shape`);
    assert.equal(outputs[i].dtype, want.dtype, `${dir}: output ${i} dtype`);
    worst = Math.max(worst, maxAbsDiff(outputs[i].data, want.data));
  }
  assert.ok(worst <= atol, `${dir}: max abs diff ${worst} > ${atol}`);
  console.log(`${dir}: ${outputs.length} outputs, max abs diff ${worst.toExponential(2)}, ${ms.toFixed(1)} ms (first run)`);
  method.free();
  program.free();
  return meta;
}

await check('xnnpack/mobilenet_v2_small', 1e-4);
await check('xnnpack/mobilenet_v2_small_int8', 1e-5);
await check('models/mobilenet_v2_small', 1e-4);

// Speech: WAV decoding and Silero VAD give the segments of ExecuTorch's probabilities.
const speech = path.join(root, 'testdata/speech');
const vadGoldens = JSON.parse(await readFile(path.join(speech, 'vad_goldens.json'), 'utf8'));
const vad = pt.loadProgram(await readFile(path.join(speech, 'silero_vad.pte')));
for (const [clip, want] of Object.entries(vadGoldens.clips)) {
  const samples = pt.wavTo16k(await readFile(path.join(speech, `${clip}.wav`)));
  const t0 = performance.now();
  const segs = vad.vadSegments(samples);
  assert.deepEqual(segs, want.segments, clip);
  console.log(`vad ${clip}: ${segs.length} segments, ${(samples.length / 16000).toFixed(2)} s of audio in ${(performance.now() - t0).toFixed(1)} ms`);
}
assert.throws(() => pt.wavTo16k(new Uint8Array([1, 2, 3])), PteronError);
vad.free();

// A malformed program is an error with pteron's reason, and the module keeps working.
const good = await readFile(path.join(root, 'testdata/xnnpack/mobilenet_v2_small/model.pte'));
const bad = good.slice(0, 100);
assert.throws(() => pt.loadProgram(bad), (e) => e instanceof PteronError && e.message.length > 0);
assert.throws(() => pt.loadProgram(new Uint8Array(0)), PteronError);
const p = pt.loadProgram(good);
assert.throws(() => p.loadMethod('nope'), PteronError);
const m = p.loadMethod();
assert.throws(() => m.run([{ dtype: 'float32', shape: [1, 2], data: new Float32Array(2) }]), PteronError);
await check('xnnpack/mobilenet_v2_small', 1e-4);
console.log('web node tests: ok');
