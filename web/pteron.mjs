// pteron in JavaScript: load, inspect and run ExecuTorch `.pte` programs with pteron's
// WebAssembly build (pteron_c.wasm: the C API of crates/pteron-c, built for
// wasm32-unknown-unknown with SIMD128 by web/build.sh). Works in browsers (a Web Worker is
// best: runs block) and in node. Single threaded.
//
//   const pt = await Pteron.load(wasmBytesOrUrl);
//   const program = pt.loadProgram(pteBytes);
//   const method = program.loadMethod('forward');
//   const [logits] = method.run([{ dtype: 'float32', shape: [1, 3, 224, 224], data }]);

/** ExecuTorch's ScalarType codes and the typed arrays that hold them. */
const DTYPES = {
  0: ['uint8', Uint8Array],
  1: ['int8', Int8Array],
  2: ['int16', Int16Array],
  3: ['int32', Int32Array],
  4: ['int64', BigInt64Array],
  5: ['float16', Uint16Array],
  6: ['float32', Float32Array],
  7: ['float64', Float64Array],
  11: ['bool', Uint8Array],
  15: ['bfloat16', Uint16Array],
};
const CODES = Object.fromEntries(Object.entries(DTYPES).map(([code, [name]]) => [name, +code]));

// `PteronTensorView` on wasm32: dtype i32, rank u32, sizes i64[16], data pointer, nbytes.
const MAX_RANK = 16;
const VIEW = { dtype: 0, rank: 4, sizes: 8, data: 8 + 8 * MAX_RANK, nbytes: 12 + 8 * MAX_RANK };
const VIEW_BYTES = 16 + 8 * MAX_RANK;

/** A failed call: `status` is the PteronStatus code, `message` pteron's reason. */
export class PteronError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'PteronError';
    this.status = status;
  }
}

export class Pteron {
  /** Instantiates the module from bytes, a URL, a Response or a compiled module. */
  static async load(source) {
    let module;
    if (source instanceof WebAssembly.Module) {
      module = source;
    } else if (typeof source === 'string' || source instanceof URL) {
      const response = await fetch(source);
      module = await WebAssembly.compile(await response.arrayBuffer());
    } else if (typeof Response !== 'undefined' && source instanceof Response) {
      module = await WebAssembly.compile(await source.arrayBuffer());
    } else {
      module = await WebAssembly.compile(source);
    }
    const instance = await WebAssembly.instantiate(module, {});
    return new Pteron(instance.exports);
  }

  constructor(exports) {
    this.x = exports;
    this.scratch = this.alloc(VIEW_BYTES + 16);
    const out = this.scratch;
    this.check(this.x.pteron_runtime_new(1, out));
    this.runtime = this.u32(out);
  }

  /** The library's version. */
  version() {
    return this.cstring(this.x.pteron_version());
  }

  /** Verifies a program held in `bytes` (a Uint8Array or ArrayBuffer); copies it. */
  loadProgram(bytes) {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const ptr = this.alloc(data.length);
    try {
      this.bytes(ptr, data.length).set(data);
      this.check(this.x.pteron_program_load_buffer(this.runtime, ptr, data.length, this.scratch));
      return new Program(this, this.u32(this.scratch));
    } finally {
      this.free(ptr, data.length);
    }
  }

  /**
   * Decodes a WAV file (PCM or float, any rate and channel count) to 16 kHz mono samples, the
   * rate the speech models take. Needs the module's speech helpers (web/build.sh has them).
   */
  wavTo16k(bytes) {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const ptr = this.alloc(data.length);
    try {
      this.bytes(ptr, data.length).set(data);
      const out = this.scratch;
      this.check(this.x.pteron_wav_to_16k(ptr, data.length, out, out + 8));
      const [p, n] = [this.u32(out), this.u32(out + 8)];
      const samples = new Float32Array(n);
      if (n > 0) {
        samples.set(new Float32Array(this.x.memory.buffer, p, n));
        this.free(p, n * 4);
      }
      return samples;
    } finally {
      this.free(ptr, data.length);
    }
  }

  // Memory helpers. WebAssembly memory may grow on any call: views are made afresh each time.
  alloc(len) {
    if (len === 0) return 0;
    const p = this.x.pteron_buffer_new(len);
    if (p === 0) throw new PteronError(-1, `out of memory (${len} bytes)`);
    return p;
  }
  free(ptr, len) {
    if (ptr !== 0) this.x.pteron_buffer_free(ptr, len);
  }
  bytes(ptr, len) {
    return new Uint8Array(this.x.memory.buffer, ptr, len);
  }
  view() {
    return new DataView(this.x.memory.buffer);
  }
  u32(ptr) {
    return this.view().getUint32(ptr, true);
  }
  cstring(ptr) {
    const m = new Uint8Array(this.x.memory.buffer);
    let end = ptr;
    while (m[end] !== 0) end++;
    return new TextDecoder().decode(m.subarray(ptr, end));
  }
  string(text) {
    const b = new TextEncoder().encode(text);
    const p = this.alloc(b.length + 1);
    this.bytes(p, b.length).set(b);
    return [p, b.length + 1];
  }
  check(status) {
    if (status !== 0) throw new PteronError(status, this.cstring(this.x.pteron_last_error()));
  }
  /** Reads a PteronTensorView at `ptr`: dtype, shape, and (when `withData`) a copy of the data. */
  readView(ptr, withData) {
    const v = this.view();
    const code = v.getInt32(ptr + VIEW.dtype, true);
    const rank = v.getUint32(ptr + VIEW.rank, true);
    const shape = [];
    for (let i = 0; i < rank; i++) shape.push(Number(v.getBigInt64(ptr + VIEW.sizes + 8 * i, true)));
    const [dtype, Typed] = DTYPES[code] ?? [`dtype ${code}`, Uint8Array];
    const nbytes = v.getUint32(ptr + VIEW.nbytes, true);
    const t = { dtype, shape, nbytes };
    if (withData) {
      const data = v.getUint32(ptr + VIEW.data, true);
      const copy = this.bytes(data, nbytes).slice();
      t.data = new Typed(copy.buffer, 0, nbytes / Typed.BYTES_PER_ELEMENT);
    }
    return t;
  }
}

export class Program {
  constructor(pt, handle) {
    this.pt = pt;
    this.handle = handle;
  }
  /** The names of the program's methods. */
  get methodNames() {
    const pt = this.pt;
    pt.check(pt.x.pteron_program_method_count(this.handle, pt.scratch));
    const n = pt.u32(pt.scratch);
    const names = [];
    for (let i = 0; i < n; i++) {
      pt.check(pt.x.pteron_program_method_name(this.handle, i, pt.scratch));
      names.push(pt.cstring(pt.u32(pt.scratch)));
    }
    return names;
  }
  /** Loads method `name` (plans its memory, prepares its kernels). */
  loadMethod(name = 'forward') {
    const pt = this.pt;
    const [s, len] = pt.string(name);
    try {
      pt.check(pt.x.pteron_method_load(this.handle, s, 1, pt.scratch));
      return new Method(pt, pt.u32(pt.scratch));
    } finally {
      pt.free(s, len);
    }
  }
  /**
   * Speech in 16 kHz mono `samples` (a Float32Array) when this program is Silero VAD's
   * export: [start, end) sample pairs, with silero-vad's default rules.
   */
  vadSegments(samples) {
    const pt = this.pt;
    const bytes = samples.length * 4;
    const data = pt.alloc(bytes);
    let capacity = 64;
    try {
      pt.bytes(data, bytes).set(new Uint8Array(samples.buffer, samples.byteOffset, bytes));
      for (;;) {
        const size = capacity * 16;
        const out = pt.alloc(size);
        try {
          pt.check(pt.x.pteron_vad_segments(this.handle, data, samples.length, out, capacity, pt.scratch));
          const n = pt.u32(pt.scratch);
          if (n <= capacity) {
            const v = new BigUint64Array(pt.x.memory.buffer, out, 2 * n);
            return Array.from({ length: n }, (_, i) => [Number(v[2 * i]), Number(v[2 * i + 1])]);
          }
          capacity = n;
        } finally {
          pt.free(out, size);
        }
      }
    } finally {
      pt.free(data, bytes);
    }
  }
  free() {
    this.pt.x.pteron_program_free(this.handle);
    this.handle = 0;
  }
}

export class Method {
  constructor(pt, handle) {
    this.pt = pt;
    this.handle = handle;
    this.inputs = this.describe(pt.x.pteron_method_num_inputs, pt.x.pteron_method_input);
    this.outputs = this.describe(pt.x.pteron_method_num_outputs, pt.x.pteron_method_output_info);
  }
  describe(count, info) {
    const pt = this.pt;
    pt.check(count(this.handle, pt.scratch));
    const n = pt.u32(pt.scratch);
    const out = [];
    for (let i = 0; i < n; i++) {
      // Non-tensor values (scalars) have no tensor description.
      out.push(info(this.handle, i, pt.scratch) === 0 ? pt.readView(pt.scratch, false) : null);
    }
    return out;
  }
  /**
   * Runs the method on `inputs` ({dtype, shape, data: a typed array}, in order) and returns its
   * outputs as {dtype, shape, data} (copies).
   */
  run(inputs) {
    const pt = this.pt;
    inputs.forEach((t, i) => this.setInput(i, t));
    pt.check(pt.x.pteron_method_execute(this.handle));
    pt.check(pt.x.pteron_method_num_outputs(this.handle, pt.scratch));
    const n = pt.u32(pt.scratch);
    const outputs = [];
    for (let i = 0; i < n; i++) {
      pt.check(pt.x.pteron_method_output(this.handle, i, pt.scratch));
      outputs.push(pt.readView(pt.scratch, true));
    }
    return outputs;
  }
  setInput(index, t) {
    const pt = this.pt;
    const code = CODES[t.dtype];
    if (code === undefined) throw new PteronError(1, `unknown dtype ${t.dtype}`);
    if (t.shape.length > MAX_RANK) throw new PteronError(1, `rank ${t.shape.length} > ${MAX_RANK}`);
    const src = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    const data = pt.alloc(src.length);
    try {
      pt.bytes(data, src.length).set(src);
      const v = pt.view();
      const p = pt.scratch;
      v.setInt32(p + VIEW.dtype, code, true);
      v.setUint32(p + VIEW.rank, t.shape.length, true);
      t.shape.forEach((d, i) => v.setBigInt64(p + VIEW.sizes + 8 * i, BigInt(d), true));
      v.setUint32(p + VIEW.data, data, true);
      v.setUint32(p + VIEW.nbytes, src.length, true);
      pt.check(pt.x.pteron_method_set_input(this.handle, index, p));
    } finally {
      pt.free(data, src.length);
    }
  }
  free() {
    this.pt.x.pteron_method_free(this.handle);
    this.handle = 0;
  }
}
