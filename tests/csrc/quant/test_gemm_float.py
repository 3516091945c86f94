"""quant.gemm_float (csrc/quant/gemm_float.h): the float-weight GEMM the vision encoder runs on.
Its contract fixes each output's summation order (one fp32 accumulator, inputs in order, one FMA
each), so it is checked bit-for-bit against a NumPy emulation of that order on every usable ISA
path, scalar included, and across thread counts, batch splits and tile positions."""
import importlib.util
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import lanes._runtime as rt

_spec = importlib.util.spec_from_file_location("quant_qref", pathlib.Path(__file__).with_name("qref.py"))
qref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qref)

Q = rt.quant

# (rows, n_in, n_out): a partial register tile and panel everywhere; n_in past one 256-input
# packed block (accumulators leave and re-enter registers); n_out past one packed block of
# columns (several column tasks) and a row count that the task grid cuts into row tiles.
SHAPES = [(1, 7, 3), (5, 203, 37), (13, 300, 77), (100, 588, 130), (97, 64, 300)]


def sequential_fma(w, x):
    """y[r, o] = fma(w[o, n-1], x[r, n-1], ... fma(w[o, 0], x[r, 0], 0)) in float32.

    The product of two float32 values is exact in float64, and so (for these magnitudes) is its
    sum with a float32 accumulator, so one rounding to float32 per step is the FMA's rounding."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    acc = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    for i in range(w.shape[1]):
        acc = (acc.astype(np.float64) + x64[:, i:i + 1] * w64[None, :, i]).astype(np.float32)
    return acc


def weights(qtype, n_out, n_in, rng):
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    return raw, qref.dequantize(arr, qtype).reshape(n_out, n_in)


@pytest.mark.parametrize("qtype", qref.FLOATS, ids=lambda t: t.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_sequential_fma_emulation(isa, qtype, shape):
    rows, n_in, n_out = shape
    rng = np.random.default_rng(rows * 1000 + n_in)
    raw, w = weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((rows, n_in)).astype(np.float16).astype(np.float32)  # as the encoder rounds them
    if rows > 2:
        x[1, : n_in // 2] = 0.0
        x[2] *= 1e-3
    y = Q.gemm_float(int(qtype), raw, n_in, n_out, x)
    assert y.shape == (rows, n_out) and y.dtype == np.float32
    np.testing.assert_array_equal(y.view(np.uint32), sequential_fma(w, x).view(np.uint32), err_msg=isa)


def test_paths_bit_identical():
    rng = np.random.default_rng(3)
    raw, _ = weights(QT.F16, 300, 520, rng)
    x = rng.standard_normal((23, 520)).astype(np.float32)  # not fp16-rounded: fp32 activations too
    before = Q.active_isa()
    try:
        outs = {}
        for name in Q.usable_isas():
            assert Q.set_isa(name)
            outs[name] = Q.gemm_float(int(QT.F16), raw, 520, 300, x, threads=2)
    finally:
        Q.set_isa(before)
    assert "scalar" in outs
    for name, y in outs.items():
        np.testing.assert_array_equal(y, outs["scalar"], err_msg=name)


@pytest.mark.parametrize("qtype", [QT.F16, QT.F32], ids=lambda t: t.name)
def test_threads_and_batch_splits_bit_identical(isa, qtype):
    rng = np.random.default_rng(9)
    n_in, n_out, rows = 333, 610, 150
    raw, _ = weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    y1 = Q.gemm_float(int(qtype), raw, n_in, n_out, x, threads=1)
    for threads in (2, 3):
        np.testing.assert_array_equal(Q.gemm_float(int(qtype), raw, n_in, n_out, x, threads=threads), y1)
    np.testing.assert_array_equal(Q.gemm_float(int(qtype), raw, n_in, n_out, x, serial=True), y1)  # one task per column tile
    for r0, r1 in ((0, 1), (7, 8), (3, 40), (41, 150), (149, 150)):
        part = Q.gemm_float(int(qtype), raw, n_in, n_out, x[r0:r1], threads=2)
        np.testing.assert_array_equal(part, y1[r0:r1])


def test_close_to_float64_product():
    rng = np.random.default_rng(4)
    raw, w = weights(QT.F16, 64, 3072, rng)
    x = rng.standard_normal((9, 3072)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
    y = Q.gemm_float(int(QT.F16), raw, 3072, 64, x)
    # Sequential fp32 summation: error ≲ n·2⁻²⁴ of Σ|w·x| in the worst case (~1.8e-4 here), far less
    # in practice; a wrong weight or input is off by ~1/n_in of the scale.
    assert np.all(np.abs(y - ref) <= 2e-5 * scale)


def test_rejects_bad_arguments():
    x = np.zeros((2, 32), dtype=np.float32)
    with pytest.raises(ValueError):
        Q.gemm_float(int(QT.Q8_0), b"\0" * 34 * 4, 32, 4, x)
    with pytest.raises(ValueError):
        Q.gemm_float(int(QT.F16), b"\0" * 64 * 4, 32, 4, np.zeros((2, 31), dtype=np.float32))
