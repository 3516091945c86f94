"""Quantized kernels: dequantization bit-exact vs the gguf package, matmul vs a NumPy emulation
on every usable ISA path, thread-count and tiling invariance. No model files needed."""
import importlib.util
import os
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import lanes._runtime as rt

# pytest runs with --import-mode=importlib: load the sibling helper module by path.
_spec = importlib.util.spec_from_file_location("quant_qref", pathlib.Path(__file__).with_name("qref.py"))
qref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qref)

Q = rt.quant
ISAS = Q.usable_isas()

# Float rounding bound for the matmul comparison, relative to Σ|w_i·x_i| of each output: the
# integer parts are exact and the activations are emulated bit-exactly, so what remains is fp32
# summation/scale-product rounding (≲ n_blocks·2⁻²⁴ in the worst case, ~1e-6 typically). A wrong
# block or a misplaced code is off by ~1/n_blocks of that magnitude, far above this bound.
RTOL = 5e-5


def shape_for(qtype):
    """(n_in, n_out): odd block counts and n_out not a multiple of any chunk or tile."""
    if qtype in qref.KQUANTS:
        return 768, 37
    if qtype in qref.FLOATS:
        return 203, 37
    return 224, 37  # 7 blocks: exercises the unpaired tail block


def test_paths_reported():
    assert "scalar" in ISAS
    assert Q.active_isa() in ISAS
    assert not Q.set_isa("no_such_isa")


def test_best_path_selected_by_default():
    order = ["scalar", "avx2", "avx_vnni", "avx512_vnni"]
    if "LANESERVE_ISA" not in os.environ:
        assert Q.active_isa() == max(ISAS, key=order.index)


@pytest.mark.parametrize("qtype", qref.ALL_TYPES, ids=lambda t: t.name)
def test_dequantize_bit_exact(qtype):
    rng = np.random.default_rng(int(qtype) + 1)
    n_in, n_out = (512, 3) if qtype in qref.KQUANTS else (96, 3)
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    ref = qref.dequantize(arr, qtype).reshape(-1)
    got = Q.dequantize(int(qtype), raw, n_in * n_out)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("qtype", [QT.F16, QT.BF16], ids=lambda t: t.name)
def test_dequantize_all_16bit_patterns(qtype):
    bits = np.arange(65536, dtype=np.uint16)
    ref = (bits.view(np.float16).astype(np.float32) if qtype == QT.F16
           else (bits.astype(np.uint32) << 16).view(np.float32))
    got = Q.dequantize(int(qtype), bits.tobytes(), bits.size)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("qtype", qref.ALL_TYPES, ids=lambda t: t.name)
def test_matmul_matches_emulation(isa, qtype):
    rng = np.random.default_rng(100 + int(qtype))
    n_in, n_out = shape_for(qtype)
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((6, n_in)).astype(np.float32)
    x[1, :40] = 0.0  # all-zero activation blocks (d = 0 path)
    x[2] *= 1e-3
    y = Q.matmul(int(qtype), raw, n_in, n_out, x)
    assert y.shape == (6, n_out) and y.dtype == np.float32
    ref, scale = qref.reference_matmul(qtype, arr, x)
    err = np.abs(y - ref)
    assert np.all(err <= RTOL * scale + 1e-30), (isa, float((err / (scale + 1e-30)).max()))


@pytest.mark.parametrize("qtype", qref.ALL_TYPES, ids=lambda t: t.name)
def test_matmul_close_to_float_product(qtype):
    """Sanity vs the unquantized product: int8 activations cost ~1% relative error."""
    rng = np.random.default_rng(7)
    n_in, n_out = shape_for(qtype)
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    w = qref.dequantize(arr, qtype).reshape(n_out, n_in).astype(np.float64)
    ref = x.astype(np.float64) @ w.T
    y = Q.matmul(int(qtype), raw, n_in, n_out, x)
    # Q8 rounding error per element ≤ d/2 = amax/254; for Gaussian x the product error is
    # ~0.4% of ‖x‖‖w‖; 3% of the norm product is a loose but wrong-kernel-catching bound.
    bound = 0.03 * np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(w, axis=1)[None, :]
    assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.parametrize("qtype", qref.ALL_TYPES, ids=lambda t: t.name)
def test_threads_and_tiling_bit_identical(isa, qtype):
    rng = np.random.default_rng(5)
    n_in = 512 if qtype in qref.KQUANTS else 160
    n_out = 203  # split unevenly over threads, not a multiple of the chunk grain
    raw, _ = qref.random_weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((7, n_in)).astype(np.float32)  # one 4-row tile + a 3-row rest
    y1 = Q.matmul(int(qtype), raw, n_in, n_out, x, threads=1)
    y2 = Q.matmul(int(qtype), raw, n_in, n_out, x, threads=2)
    y3 = Q.matmul(int(qtype), raw, n_in, n_out, x, threads=3)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, y3)
    for r in (0, 4, 6):
        single = Q.matmul(int(qtype), raw, n_in, n_out, x[r:r + 1], threads=2)
        np.testing.assert_array_equal(single[0], y1[r])


@pytest.mark.parametrize("qtype", [QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q6_K, QT.Q5_0], ids=lambda t: t.name)
def test_paths_agree_with_scalar(qtype):
    rng = np.random.default_rng(11)
    n_in, n_out = (1024, 50) if qtype in qref.KQUANTS else (576, 50)
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((5, n_in)).astype(np.float32)
    _, scale = qref.reference_matmul(qtype, arr, x)
    before = Q.active_isa()
    try:
        outs = {}
        for name in ISAS:
            assert Q.set_isa(name)
            outs[name] = Q.matmul(int(qtype), raw, n_in, n_out, x, threads=2)
    finally:
        Q.set_isa(before)
    for name, y in outs.items():
        assert np.all(np.abs(y - outs["scalar"]) <= RTOL * scale), name


LOW_BIT = [QT.Q2_K, QT.Q3_K, QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4]


@pytest.mark.parametrize("qtype", LOW_BIT, ids=lambda t: t.name)
def test_low_bit_paths_bit_identical_to_scalar(qtype):
    """Q2_K / Q3_K / IQ4_XS reduce each super-block (IQ4_NL / MXFP4 each block) to one exact int32 and
    accumulate with one fma in block order on every path: the SIMD kernels equal the scalar
    reference bit for bit, for GEMV and 4-row tiles alike."""
    rng = np.random.default_rng(13)
    n_in, n_out = (1280, 41) if qtype in qref.KQUANTS else (608, 41)  # IQ4_NL / MXFP4: 19 blocks (odd)
    raw, _ = qref.random_weights(qtype, n_out, n_in, rng)
    x = rng.standard_normal((6, n_in)).astype(np.float32)
    before = Q.active_isa()
    try:
        outs = {}
        for name in ISAS:
            assert Q.set_isa(name)
            outs[name] = Q.matmul(int(qtype), raw, n_in, n_out, x, threads=2)
            gemv = Q.matmul(int(qtype), raw, n_in, n_out, x[3:4], threads=1)
            np.testing.assert_array_equal(gemv[0], outs[name][3])
    finally:
        Q.set_isa(before)
    for name, y in outs.items():
        np.testing.assert_array_equal(y.view(np.uint32), outs["scalar"].view(np.uint32), err_msg=name)


def test_low_bit_types_are_interleaved_when_n_out_allows():
    # All four repack into the interleaved layout (test_interleaved.py); an n_out that is not whole
    # 16-row groups (or n_in not whole blocks) keeps the row layout.
    for qt in LOW_BIT:
        assert Q.interleave_supported(int(qt), 256, 32)
        assert not Q.interleave_supported(int(qt), 256, 41)
        assert not Q.interleave_supported(int(qt), 128 if qt not in (QT.IQ4_NL, QT.MXFP4) else 48, 32)


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Q.dequantize(int(QT.Q4_0), b"\0" * 18, 31)
    with pytest.raises(ValueError):
        Q.dequantize(int(QT.IQ2_XXS), b"\0" * 66, 256)  # a ggml type the runtime does not run
    with pytest.raises(ValueError):
        Q.matmul(int(QT.Q8_0), b"\0" * 33, 32, 1, np.zeros((1, 32), np.float32))
    with pytest.raises(ValueError):
        Q.matmul(int(QT.Q8_0), b"\0" * 34, 32, 1, np.zeros((1, 64), np.float32))


def test_every_executable_path_passes_self_test():
    """A path whose instructions run but whose kernels disagree with scalar is dropped at start-up;
    on a CPU that runs it, that must show up here as a failure rather than a silent fallback."""
    usable = rt.cpu_features()["usable"]
    expected = {"scalar"}
    if usable["avx2"]:
        expected.add("avx2")
    if usable["avx2"] and usable["avx_vnni"]:
        expected.add("avx_vnni")
    if usable["avx2"] and usable["avx512"] and usable["avx512_vnni"]:
        expected.add("avx512_vnni")
    assert set(ISAS) == expected


def test_every_path_the_cpu_supports_passes_its_start_up_self_test():
    # A kernel that differs from the scalar reference makes dispatch drop its whole path at start-up:
    # the server still works, silently on a slower path (once, every IQ4 type broke AVX-512 VNNI).
    supported = Q.supported_isas()
    assert "scalar" in supported
    assert Q.usable_isas() == supported
