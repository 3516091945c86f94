"""Row-interleaved weights (the layout the model repacks Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/
Q2_K/Q3_K/MXFP4 matrices into at load): lossless repacking, matmul against the NumPy emulation on every usable ISA path for every
batch size 1..64, bit-identity across paths, threads, batch sizes and tile positions."""
import importlib.util
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import lanes._runtime as rt

_spec = importlib.util.spec_from_file_location("quant_qref_il", pathlib.Path(__file__).with_name("qref.py"))
qref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qref)

Q = rt.quant
ISAS = Q.usable_isas()
RTOL = 5e-5  # as in test_quant_kernels.py: fp32 rounding relative to Σ|w·x|
N_OUT = 48  # 3 groups of 16 rows
TYPES = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q4_K, QT.Q5_K, QT.Q6_K,
         QT.IQ4_NL, QT.IQ4_XS, QT.Q2_K, QT.Q3_K, QT.MXFP4]  # the interleavable types
# Bytes a 16-row record adds to the rows' own (scales stored one byte each).
RECORD_EXTRA_BYTES = {QT.Q4_K: 64, QT.Q5_K: 64, QT.IQ4_XS: 32, QT.Q3_K: 64}
# Types whose interleaved kernels keep the row kernels' integer per super-block (block) and float order.
LOW_BIT = [QT.IQ4_NL, QT.IQ4_XS, QT.Q2_K, QT.Q3_K, QT.MXFP4]


def n_in_for(qtype):
    # 7 blocks (odd: the unpaired PairPerm tail); K-quants 3 super-blocks.
    return 768 if qtype in qref.KQUANTS else 224


def weights(qtype, seed=0):
    rng = np.random.default_rng(int(qtype) * 31 + seed)
    raw, arr = qref.random_weights(qtype, N_OUT, n_in_for(qtype), rng)
    return raw, arr, Q.interleave(int(qtype), raw, n_in_for(qtype), N_OUT)


def on_every_path(run):
    """run(path name) with each usable kernel path active; asserts every result equals the scalar path's
    bit for bit and returns them by path."""
    before = Q.active_isa()
    try:
        outs = {}
        for name in ISAS:
            assert Q.set_isa(name)
            outs[name] = run(name)
    finally:
        Q.set_isa(before)
    for name, y in outs.items():
        np.testing.assert_array_equal(y.view(np.uint32), outs["scalar"].view(np.uint32), err_msg=name)
    return outs


def test_supported_types_and_shapes():
    for qt in TYPES:
        assert Q.interleave_supported(int(qt), 256, 32)
        assert not Q.interleave_supported(int(qt), 256, 40)  # n_out not a multiple of 16
    for qt in qref.FLOATS:
        assert not Q.interleave_supported(int(qt), 256, 32)
    with pytest.raises(ValueError):
        Q.interleave(int(QT.Q4_1), b"\0" * 20 * 2 * 8, 64, 8)
    with pytest.raises(ValueError):
        Q.matmul(int(QT.Q8_0), b"\0" * 34 * 2 * 8, 64, 8, np.zeros((1, 64), np.float32), interleaved=True)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_repacked_rows_dequantize_bit_exact(qtype):
    raw, _, il = weights(qtype)
    N_IN = n_in_for(qtype)
    assert len(il) == len(raw) + 3 * 3 * RECORD_EXTRA_BYTES.get(qtype, 0)  # 3 groups x 3 super-blocks
    for row in range(N_OUT):
        a = Q.dequantize_weight_row(int(qtype), raw, N_IN, N_OUT, row)
        b = Q.dequantize_weight_row(int(qtype), il, N_IN, N_OUT, row, interleaved=True)
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_every_batch_size_matches_emulation_and_is_tile_invariant(isa, qtype):
    raw, arr, il = weights(qtype)
    N_IN = n_in_for(qtype)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64 + 5, N_IN)).astype(np.float32)
    x[1, :40] = 0.0  # all-zero activation blocks
    x[2] *= 1e-3
    full = Q.matmul(int(qtype), il, N_IN, N_OUT, x, interleaved=True)
    ref, scale = qref.reference_matmul(qtype, arr, x)
    assert np.all(np.abs(full - ref) <= RTOL * scale + 1e-30), isa
    for n in range(1, 65):
        s = n % 5  # the same rows land at other positions inside the 4- or 8-row tiles
        np.testing.assert_array_equal(Q.matmul(int(qtype), il, N_IN, N_OUT, x[s:s + n], interleaved=True),
                                      full[s:s + n])
    # Every row equals that row computed alone.
    for r in range(0, 64, 7):
        np.testing.assert_array_equal(Q.matmul(int(qtype), il, N_IN, N_OUT, x[r:r + 1], interleaved=True)[0], full[r])


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_paths_bit_identical_and_close_to_row_layout(qtype):
    raw, arr, il = weights(qtype, seed=1)
    N_IN = n_in_for(qtype)
    x = np.random.default_rng(9).standard_normal((13, N_IN)).astype(np.float32)
    _, scale = qref.reference_matmul(qtype, arr, x)

    def run(name):
        y = Q.matmul(int(qtype), il, N_IN, N_OUT, x, threads=2, interleaved=True)
        rows = Q.matmul(int(qtype), raw, N_IN, N_OUT, x, threads=2)
        assert np.all(np.abs(y - rows) <= RTOL * scale), name
        return y

    on_every_path(run)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_thread_counts_bit_identical(isa, qtype):
    rng = np.random.default_rng(5)
    n_in, n_out = (512 if qtype in qref.KQUANTS else 160), 16 * 13  # 13 groups: split unevenly over threads
    raw, _ = qref.random_weights(qtype, n_out, n_in, rng)
    il = Q.interleave(int(qtype), raw, n_in, n_out)
    x = rng.standard_normal((11, n_in)).astype(np.float32)
    y1 = Q.matmul(int(qtype), il, n_in, n_out, x, threads=1, interleaved=True)
    for t in (2, 3):
        np.testing.assert_array_equal(Q.matmul(int(qtype), il, n_in, n_out, x, threads=t, interleaved=True), y1)


@pytest.mark.parametrize("qtype", LOW_BIT, ids=lambda t: t.name)
def test_low_bit_types_equal_the_row_layout_bit_for_bit(qtype):
    """Their row kernels already reduce a block (the K types: a super-block) to one exact int32 and add it with
    one fma in block order (Q2_K's mins into a second accumulator); the interleaved kernels do the same, so the
    two layouts give the same bits on every path, for a single row, a batch and each row of it alone."""
    raw, _, il = weights(qtype, seed=4)
    N_IN = n_in_for(qtype)
    x = np.random.default_rng(17).standard_normal((11, N_IN)).astype(np.float32)
    x[4, :64] = 0.0

    def run(name):
        y = Q.matmul(int(qtype), il, N_IN, N_OUT, x, interleaved=True)
        np.testing.assert_array_equal(y.view(np.uint32), Q.matmul(int(qtype), raw, N_IN, N_OUT, x).view(np.uint32),
                                      err_msg=name)
        for r in (0, 4, 10):
            np.testing.assert_array_equal(Q.matmul(int(qtype), il, N_IN, N_OUT, x[r:r + 1], interleaved=True)[0],
                                          y[r], err_msg=name)
        return y

    on_every_path(run)


@pytest.mark.parametrize("qtype", [QT.Q2_K, QT.Q3_K], ids=lambda t: t.name)
def test_extreme_low_bit_codes_stay_exact(qtype):
    """All codes at their largest (Q2_K 3, Q3_K +3 with every hmask bit set, or −4 with none) against
    activations of ±127: the int16 sub-block dots and scale products must not saturate on any path."""
    n_in = 512
    rng = np.random.default_rng(23)
    raw, _ = qref.random_weights(qtype, N_OUT, n_in, rng)
    blocks = np.frombuffer(raw, np.uint8).reshape(N_OUT, n_in // 256, -1).copy()
    if qtype == QT.Q2_K:
        blocks[:, :, 16:80] = 0xFF  # codes 3
        blocks[:16, :, :16] = 0xFF  # scale 15, min 15
    else:
        blocks[:16, :, :96] = 0xFF  # every hmask bit and 2-bit part 3: codes +3
        blocks[16:, :, :96] = 0x00  # no hmask bit, 2-bit part 0: codes −4
        blocks[:, :, 96:108] = 0xFF  # scale 63 − 32 = 31
    raw = blocks.tobytes()
    il = Q.interleave(int(qtype), raw, n_in, N_OUT)
    x = np.where(np.arange(n_in) % 3 == 0, 1.0, -1.0).astype(np.float32)[None, :].repeat(3, 0)
    x[1] = 1.0

    def run(name):
        y = Q.matmul(int(qtype), il, n_in, N_OUT, x, interleaved=True)
        np.testing.assert_array_equal(y, Q.matmul(int(qtype), raw, n_in, N_OUT, x), err_msg=name)
        return y

    outs = on_every_path(run)
    ref, scale = qref.reference_matmul(qtype, blocks.reshape(N_OUT, -1), x)  # the gguf package's dequantization
    assert np.all(np.abs(outs["scalar"] - ref) <= RTOL * scale + 1e-30)
    for row in (0, 20):
        w = Q.dequantize_weight_row(int(qtype), il, n_in, N_OUT, row, interleaved=True)
        np.testing.assert_array_equal(w, Q.dequantize_weight_row(int(qtype), raw, n_in, N_OUT, row))


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS, QT.Q2_K, QT.Q3_K], ids=lambda t: t.name)
def test_q8_k_quantizer_edge_cases_identical_on_every_path(qtype):
    """The SIMD Q8_K quantizer must match the scalar one exactly: the first element of largest |x|
    sets the scale (opposite-sign ties), all-zero super-blocks, values that round to ±127.5."""
    raw, _, il = weights(qtype, seed=2)
    n_in = n_in_for(qtype)
    rng = np.random.default_rng(13)
    x = rng.standard_normal((5, n_in)).astype(np.float32)
    x[0, 10], x[0, 3] = 4.0, -4.0          # tie of |x|, negative first
    x[1, 3], x[1, 10] = 4.0, -4.0          # tie of |x|, positive first
    x[2, :256] = 0.0                       # an all-zero super-block
    x[3, 256:512] = np.linspace(-1, 1, 256, dtype=np.float32)
    x[4] = np.round(x[4] * 127) / 127      # many exact halves after scaling
    on_every_path(lambda name: Q.matmul(int(qtype), il, n_in, N_OUT, x, interleaved=True))
