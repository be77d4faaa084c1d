// The page's Web Worker: owns the pteron module and runs programs off the main thread.
// Messages in: {id, cmd: 'info'} | {id, cmd: 'demo'} | {id, cmd: 'run', pte: ArrayBuffer,
// inputs: ArrayBuffer[], repeat} | {id, cmd: 'vad', wav?: ArrayBuffer}. Replies:
// {id, ok: true, ...result} or {id, ok: false, error}.
import { Pteron } from './pteron.mjs';
import { readNpy } from './npy.mjs';

const ready = (async () => {
  const response = await fetch(new URL('./dist/pteron_c.wasm', import.meta.url));
  const bytes = await response.arrayBuffer();
  const t0 = performance.now();
  const pt = await Pteron.load(bytes);
  return { pt, wasmBytes: bytes.byteLength, instantiateMs: performance.now() - t0 };
})();

async function fetchBytes(url) {
  const r = await fetch(new URL(url, import.meta.url));
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.arrayBuffer();
}

/** Inputs for a method without .npy files: a deterministic ramp in each declared shape. */
function synthetic(info) {
  const n = info.shape.reduce((a, d) => a * d, 1);
  const data = info.dtype === 'float32' ? new Float32Array(n) : null;
  if (!data) throw new Error(`give an .npy for the ${info.dtype} input`);
  for (let i = 0; i < n; i++) data[i] = ((i * 37) % 101) / 101 - 0.5;
  return { dtype: info.dtype, shape: info.shape, data };
}

function run(pt, pte, inputs, repeat) {
  const t0 = performance.now();
  const program = pt.loadProgram(new Uint8Array(pte));
  const method = program.loadMethod(program.methodNames.includes('forward') ? 'forward' : program.methodNames[0]);
  const loadMs = performance.now() - t0;
  try {
    const tensors = method.inputs.map((info, i) => (inputs[i] ? readNpy(inputs[i]) : synthetic(info)));
    let outputs = method.run(tensors);
    const times = [];
    for (let r = 0; r < repeat; r++) {
      const s = performance.now();
      outputs = method.run(tensors);
      times.push(performance.now() - s);
    }
    times.sort((a, b) => a - b);
    return {
      methods: program.methodNames,
      inputs: method.inputs,
      outputs,
      loadMs,
      medianMs: times[Math.floor(times.length / 2)],
      minMs: times[0],
      maxMs: times[times.length - 1],
    };
  } finally {
    method.free();
    program.free();
  }
}

self.onmessage = async ({ data: msg }) => {
  try {
    const { pt, wasmBytes, instantiateMs } = await ready;
    let result;
    if (msg.cmd === 'info') {
      result = { version: pt.version(), wasmBytes, instantiateMs };
    } else if (msg.cmd === 'demo') {
      const dir = '../testdata/xnnpack/mobilenet_v2_small/';
      const [pte, input, golden] = await Promise.all(
        ['model.pte', 'input0.npy', 'expected0.npy'].map((f) => fetchBytes(dir + f)),
      );
      result = run(pt, pte, [input], msg.repeat ?? 10);
      const want = readNpy(golden).data;
      const got = result.outputs[0].data;
      let diff = 0;
      for (let i = 0; i < want.length; i++) diff = Math.max(diff, Math.abs(got[i] - want[i]));
      result.maxAbsDiff = diff;
      result.name = 'MobileNetV2 (width 0.25, 64×64), XNNPACK fp32';
    } else if (msg.cmd === 'vad') {
      const dir = '../testdata/speech/';
      const [pte, wav] = await Promise.all([
        fetchBytes(dir + 'silero_vad.pte'),
        msg.wav ?? fetchBytes(dir + 'gaps_16k.wav'),
      ]);
      const t0 = performance.now();
      const samples = pt.wavTo16k(new Uint8Array(wav));
      const program = pt.loadProgram(new Uint8Array(pte));
      try {
        const t1 = performance.now();
        const segments = program.vadSegments(samples);
        result = {
          name: msg.wav ? msg.name : 'Silero VAD on the bundled clip (gaps_16k.wav)',
          seconds: samples.length / 16000,
          segments,
          decodeMs: t1 - t0,
          vadMs: performance.now() - t1,
        };
      } finally {
        program.free();
      }
    } else if (msg.cmd === 'run') {
      result = run(pt, msg.pte, msg.inputs ?? [], msg.repeat ?? 5);
      result.name = msg.name;
    } else {
      throw new Error(`unknown command ${msg.cmd}`);
    }
    for (const o of result.outputs ?? []) {
      o.first = Array.from(o.data.slice(0, 8), Number);
      delete o.data;
    }
    self.postMessage({ id: msg.id, ok: true, ...result });
  } catch (e) {
    self.postMessage({ id: msg.id, ok: false, error: `${e.name}: ${e.message}` });
  }
};
