// Runs a wasm32-wasip1 program (a test binary) under node's WASI, with the host's file system
// preopened at / (tests read fixtures by absolute path) and the arguments passed through:
// the cargo runner for `--target wasm32-wasip1` (tools/dev/wasm_tests.sh).
import { readFile } from 'node:fs/promises';
import { WASI } from 'node:wasi';
import process from 'node:process';

const [file, ...args] = process.argv.slice(2);
const wasi = new WASI({
  version: 'preview1',
  args: [file, ...args],
  env: process.env,
  preopens: { '/': '/' },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(file));
// Debian's wasi-libc has no pthreads, yet std names them (linked with --allow-undefined):
// thread attributes "work" and pthread_create fails with ENOSYS, so std::thread::spawn
// reports an error, as on a WebAssembly host without threads.
const ENOSYS = 52;
const imports = wasi.getImportObject();
imports.env = Object.fromEntries(
  WebAssembly.Module.imports(module)
    .filter((i) => i.module === 'env' && i.kind === 'function')
    .map((i) => [i.name, i.name.startsWith('pthread_attr_') ? () => 0 : () => ENOSYS]),
);
const instance = await WebAssembly.instantiate(module, imports);
process.exitCode = wasi.start(instance);
