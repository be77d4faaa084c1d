// Reads and writes NumPy `.npy` files (version 1/2, little-endian, C order) as
// {dtype, shape, data: a typed array}: the inputs and goldens of web/ and its tests.
const TYPES = {
  '<f4': ['float32', Float32Array],
  '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array],
  '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array],
  '|b1': ['bool', Uint8Array],
};

export function readNpy(bytes) {
  const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const magic = String.fromCharCode(...b.subarray(0, 6));
  if (magic !== '\x93NUMPY') throw new Error('not a .npy file');
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const major = b[6];
  const hlen = major === 1 ? dv.getUint16(8, true) : dv.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(b.subarray(start, start + hlen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const order = /'fortran_order':\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  if (!descr || !TYPES[descr] || order !== 'False' || shapeText === undefined) {
    throw new Error(`unsupported .npy header ${header}`);
  }
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const [dtype, Typed] = TYPES[descr];
  const n = shape.reduce((a, d) => a * d, 1);
  const off = start + hlen;
  const len = n * Typed.BYTES_PER_ELEMENT;
  if (off + len > b.length) throw new Error('truncated .npy data');
  // A copy on its own buffer (node's Buffer.slice is a view into a shared pool).
  const copy = new Uint8Array(len);
  copy.set(b.subarray(off, off + len));
  return { dtype, shape, data: new Typed(copy.buffer) };
}
