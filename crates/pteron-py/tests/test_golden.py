"""Every committed model fixture (portable and XNNPACK) run through the Python package and
compared with ExecuTorch's outputs, as the Rust golden tests do."""

import numpy as np
import pytest

import pteron
from conftest import fixture_dirs, load_meta

FIXTURES = fixture_dirs("models") + fixture_dirs("xnnpack")


def check(name, got, want, atol, rtol):
    assert isinstance(got, np.ndarray), f"{name}: {type(got)}"
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w))
    bad &= ~(np.isnan(g) & np.isnan(w))
    assert not bad.any(), f"{name}: max abs error {err.max():e} (atol {atol}, rtol {rtol})"


@pytest.mark.parametrize("d", FIXTURES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_fixture_matches_executorch(d):
    meta = load_meta(d)
    atol = meta.get("tolerance", {}).get("atol", 1e-5)
    rtol = meta.get("tolerance", {}).get("rtol", 1e-5)
    n_in = len(meta["inputs"])
    data_path = d / meta["external_data"] if "external_data" in meta else None
    program = pteron.Runtime.get().load_program(d / "model.pte", data_path=data_path)
    assert "forward" in program.method_names
    method = program.load_method("forward")
    assert method.metadata.num_inputs() == n_in
    cases = [c.get("dir", "") for c in meta.get("cases", [{"dir": ""}])]
    for case in cases:
        cdir = d / case
        inputs = []
        for i in range(n_in):
            p = cdir / f"input{i}.npy"
            inputs.append(np.load(p if p.exists() else d / f"input{i}.npy"))
        outputs = method.execute(inputs)
        k = 0
        while (cdir / f"expected{k}.npy").exists():
            want = np.load(cdir / f"expected{k}.npy")
            got = outputs[k]
            if not isinstance(got, np.ndarray):  # a scalar output, stored as a 0-d array
                got = np.asarray(got, dtype=want.dtype)
            check(f"{d.name} {case} output {k}", got, want, atol, rtol)
            k += 1
        assert k > 0 and k == len(outputs), f"{d.name} {case}: {k} goldens, {len(outputs)} outputs"


def test_same_numbers_from_bytes_path_and_file_object(testdata):
    d = testdata / "models" / "mobilenet_v2_small"
    x = np.load(d / "input0.npy")
    want = np.load(d / "expected0.npy")
    rt = pteron.Runtime.get()
    raw = (d / "model.pte").read_bytes()
    with open(d / "model.pte", "rb") as f:
        sources = [str(d / "model.pte"), d / "model.pte", raw, bytearray(raw), memoryview(raw), f]
        for src in sources:
            out = rt.load_program(src).load_method("forward").execute([x])
            np.testing.assert_allclose(out[0], want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_counts_give_the_same_numbers(testdata, threads):
    d = testdata / "xnnpack" / "mobilenet_v2_small"
    x = np.load(d / "input0.npy")
    rt = pteron.Runtime(threads=threads)
    assert rt.threads == threads
    out = rt.load_program(d / "model.pte").load_method("forward").execute([x])[0]
    np.testing.assert_allclose(out, np.load(d / "expected0.npy"), atol=1e-5, rtol=1e-4)


def test_portable_runtime_matches(testdata):
    d = testdata / "models" / "cnn"
    rt = pteron.Runtime(portable=True)
    out = rt.load_program(d / "model.pte").load_method("forward").execute([np.load(d / "input0.npy")])
    np.testing.assert_allclose(out[0], np.load(d / "expected0.npy"), atol=1e-5, rtol=1e-4)
