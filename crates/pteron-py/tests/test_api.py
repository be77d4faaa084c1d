"""The executorch.runtime-shaped API: metadata, inputs of every kind, and the typed
exceptions bad input raises (never a crash)."""

import threading
import time

import numpy as np
import pytest

import pteron
from pteron.runtime import Runtime


@pytest.fixture(scope="module")
def mobilenet(testdata):
    d = testdata / "models" / "mobilenet_v2_small"
    return d, Runtime.get().load_program(d / "model.pte")


def test_runtime_singleton_and_registries():
    rt = Runtime.get()
    assert rt is Runtime.get()
    assert rt.threads >= 1
    ops = rt.operator_registry.operator_names
    assert "aten::convolution.out" in ops and "aten::add.out" in ops
    assert rt.backend_registry.is_available("XnnpackBackend")
    assert not rt.backend_registry.is_available("VulkanBackend")


def test_metadata_has_executorch_shape(mobilenet):
    d, program = mobilenet
    assert program.method_names == {"forward"}
    meta = program.metadata("forward")
    assert meta.name() == "forward"
    assert meta.num_inputs() == 1 and meta.num_outputs() == 1
    t = meta.input_tensor_meta(0)
    assert tuple(t.sizes()) == (1, 3, 64, 64)
    assert t.dtype() == 6  # ExecuTorch's ScalarType::Float
    assert t.nbytes() == 1 * 3 * 64 * 64 * 4
    assert t.is_memory_planned()
    assert t.numpy_dtype == "float32"
    assert repr(meta) == (
        "MethodMeta(name='forward', num_inputs=1, input_tensor_meta=['TensorInfo(sizes=[1, 3, 64, 64], "
        "dtype=Float, is_memory_planned=True, nbytes=49152)'], num_outputs=1, output_tensor_meta="
        "['TensorInfo(sizes=[1, 10], dtype=Float, is_memory_planned=True, nbytes=40)'])"
    )
    with pytest.raises(IndexError):
        meta.input_tensor_meta(1)
    m = program.load_method("forward")
    assert m is program.load_method("forward")  # loaded once, as in ExecuTorch
    assert repr(m.metadata) == repr(meta)


def test_inputs_of_many_kinds(mobilenet):
    d, program = mobilenet
    m = program.load_method("forward")
    x = np.load(d / "input0.npy")
    want = np.load(d / "expected0.npy")
    # A non-contiguous view, a big-endian copy, a nested list, and an object with __array__
    # (what torch tensors offer) all give the same numbers.
    wide = np.zeros((1, 3, 64, 128), np.float32)
    wide[..., ::2] = x
    class ArrayLike:
        dtype = np.dtype("float32")
        def __array__(self, dtype=None, copy=None):
            return x
    for inp in [x, wide[..., ::2], x.astype(">f4"), x.tolist(), ArrayLike()]:
        out = m.execute([inp])
        np.testing.assert_allclose(out[0], want, atol=2e-5, rtol=1e-4)
    assert m([x])[0].shape == (1, 10)  # __call__, as ExecuTorch's method has
    out = m.execute((x,))
    assert isinstance(out, list) and out[0].flags.owndata is False or out[0].base is not None
    # Outputs own their memory: a second run does not change the first's arrays.
    first = m.execute([x])[0].copy()
    kept = m.execute([x])[0]
    m.execute([np.zeros_like(x)])
    np.testing.assert_array_equal(kept, first)


def test_fp16_and_multi_output_dtypes(testdata):
    d = testdata / "xnnpack" / "cnn_fp16"
    m = Runtime.get().load_program(d / "model.pte").load_method("forward")
    out = m.execute([np.load(d / "input0.npy")])[0]
    assert out.dtype == np.float16
    d = testdata / "models" / "multi_output"
    m = Runtime.get().load_program(d / "model.pte").load_method("forward")
    outs = m.execute([np.load(d / "input0.npy")])
    assert [o.dtype for o in outs] == [np.float32, np.int64, np.bool_]


def test_wrong_dtype_shape_and_count_raise_input_error(mobilenet):
    d, program = mobilenet
    m = program.load_method("forward")
    x = np.load(d / "input0.npy")
    with pytest.raises(pteron.InputError) as e:
        m.execute([x.astype(np.float64)])
    assert e.value.index == 0 and e.value.expected == "float32" and e.value.given == "float64"
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)
    with pytest.raises(pteron.InputError) as e:
        m.execute([x[:, :, :32]])
    assert e.value.expected == [1, 3, 64, 64] and e.value.given == [1, 3, 32, 64]
    with pytest.raises(pteron.InputError):
        m.execute([])
    with pytest.raises(pteron.InputError):
        m.execute([x, x])
    with pytest.raises(pteron.InputError):
        m.execute(42)
    with pytest.raises(pteron.InputError):
        m.execute([np.array(["a", "b"])])
    with pytest.raises(pteron.InputError):
        m.execute([[1.0, "x"]])
    # The method still works after every refusal.
    np.testing.assert_allclose(m.execute([x])[0], np.load(d / "expected0.npy"), atol=2e-5, rtol=1e-4)


def test_bad_files_raise_program_error(testdata, tmp_path):
    raw = (testdata / "models" / "mobilenet_v2_small" / "model.pte").read_bytes()
    rt = Runtime.get()
    for bad in [b"", b"garbage" * 10, raw[: len(raw) // 2], raw[:64]]:
        with pytest.raises(pteron.ProgramError):
            rt.load_program(bad)
    flipped = bytearray(raw)
    for i in range(8, 4096, 97):
        flipped[i] ^= 0xFF
    with pytest.raises(pteron.PteronError):
        rt.load_program(bytes(flipped)).load_method("forward")
    with pytest.raises(pteron.ProgramError):
        rt.load_program(tmp_path / "missing.pte")
    with pytest.raises(TypeError):
        rt.load_program(12345)


def test_missing_method_operator_and_closed(testdata):
    rt = Runtime.get()
    program = rt.load_program(testdata / "models" / "mlp" / "model.pte")
    with pytest.raises(pteron.MethodNotFoundError) as e:
        program.load_method("backward")
    assert isinstance(e.value, KeyError) and e.value.name == "backward"
    with pytest.raises(pteron.MethodNotFoundError):
        program.metadata("backward")
    # A runtime without the XNNPACK backend cannot run a delegated program: typed error.
    m = program.load_method("forward")
    program.close()
    with pytest.raises(pteron.ClosedError):
        program.load_method("forward")
    with pytest.raises(pteron.ClosedError):
        program.metadata("forward")
    x = np.load(testdata / "models" / "mlp" / "input0.npy")
    assert m.execute([x])[0].shape == (4, 10)  # loaded methods keep working
    m.close()
    with pytest.raises(pteron.ClosedError):
        m.execute([x])
    with rt.load_program(testdata / "models" / "mlp" / "model.pte") as p:
        assert p.load_method("forward").execute([x])[0].shape == (4, 10)
    with pytest.raises(pteron.ClosedError):
        p.load_method("forward")


def test_operator_not_found_names_the_ops(testdata):
    # The LLM fixture calls llama:: custom ops; a portable-only kernel library has them too,
    # so use a program whose op was renamed in memory: every byte is checked, the op name
    # string is not, and the load fails naming it.
    raw = bytearray((testdata / "models" / "mlp" / "model.pte").read_bytes())
    i = raw.find(b"aten::addmm")
    if i < 0:
        i = raw.find(b"aten::linear")
    assert i >= 0
    raw[i : i + 6] = b"nope::"
    with pytest.raises(pteron.OperatorNotFoundError) as e:
        Runtime.get().load_program(bytes(raw)).load_method("forward")
    assert any(op.startswith("nope::") for op in e.value.ops)


def test_methods_run_from_several_python_threads(testdata):
    d = testdata / "xnnpack" / "mobilenet_v2_small"
    x = np.load(d / "input0.npy")
    want = np.load(d / "expected0.npy")
    program = Runtime.get().load_program(d / "model.pte")
    errors = []

    def work(shared):
        try:
            m = program.load_method("forward") if shared else program.load_method("forward", threads=1)
            for _ in range(10):
                np.testing.assert_allclose(m.execute([x])[0], want, atol=1e-5, rtol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_gil_is_released_while_executing(testdata):
    # Another Python thread makes progress while a method runs.
    d = testdata / "xnnpack" / "mobilenet_v2_small"
    x = np.load(d / "input0.npy")
    m = Runtime.get().load_program(d / "model.pte").load_method("forward", threads=1)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0)  # hands the GIL back at once, so the main thread never waits long

    t = threading.Thread(target=ticker)
    t.start()
    try:
        import sys
        old = sys.getswitchinterval()
        sys.setswitchinterval(10.0)  # without a release, the ticker would wait 10 s
        before = len(ticks)
        for _ in range(20):
            m.execute([x])
        during = len(ticks) - before
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join()
    assert during > 0
