"""AMX-INT8 tile kernels (csrc/quant/kernels_amx.cpp): on a CPU that lets this process use them, interleaved
K-quant and 32-block products with 16 or more activation rows run on tiles, and must give the same bits as the zmm
kernels they replace (and the scalar reference) for every row count, thread count and code extreme."""
import importlib.util
import os
import subprocess
import sys
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import lanes._runtime as rt

_spec = importlib.util.spec_from_file_location("quant_qref_amx", pathlib.Path(__file__).with_name("qref.py"))
qref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qref)

Q = rt.quant
AMX_TYPES = [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.IQ4_NL, QT.MXFP4]
needs_amx = pytest.mark.skipif(not Q.amx_available(), reason="no usable AMX-INT8 on this CPU")


@pytest.fixture
def vnni():
    before = Q.active_isa()
    assert Q.set_isa("avx512_vnni")
    yield
    Q.set_amx(True)
    Q.set_isa(before)


def amx_and_zmm(run):
    """run() with the tile kernels on, then off; both results."""
    assert Q.set_amx(True)
    on = run()
    assert not Q.set_amx(False)
    off = run()
    Q.set_amx(True)
    return on, off


def test_amx_reported_consistently():
    usable = rt.cpu_features()["usable"]
    assert Q.amx_available() <= usable["amx_int8"]  # tiles in use only where the probe ran them
    if not Q.amx_available():
        assert Q.set_amx(True) is False


@needs_amx
@pytest.mark.parametrize("qtype", AMX_TYPES, ids=lambda t: t.name)
def test_tiles_equal_zmm_kernels_and_scalar_for_every_row_count(vnni, qtype):
    rng = np.random.default_rng(int(qtype))
    n_in, n_out = (1024 if qtype in qref.KQUANTS else 992), 64  # 31 blocks: a pair with one block
    raw, arr = qref.random_weights(qtype, n_out, n_in, rng)
    il = Q.interleave(int(qtype), raw, n_in, n_out)
    x = rng.standard_normal((300, n_in)).astype(np.float32)
    x[7, :300] = 0.0
    # 16..33: one tile and the overlapping last one; 128 / 129 / 300: the 128-row accumulator chunks.
    for n in [16, 17, 23, 31, 32, 33, 47, 128, 129, 300]:
        xs = x[5:5 + n] if n < 295 else x[:n]
        on, off = amx_and_zmm(lambda: Q.matmul(int(qtype), il, n_in, n_out, xs, threads=2, interleaved=True))
        np.testing.assert_array_equal(on.view(np.uint32), off.view(np.uint32), err_msg=f"{n} rows")
    ref, scale = qref.reference_matmul(qtype, arr, x[:40])
    assert np.all(np.abs(on[:40] - ref) <= 5e-5 * scale + 1e-30)
    Q.set_isa("scalar")
    np.testing.assert_array_equal(Q.matmul(int(qtype), il, n_in, n_out, x[:40], interleaved=True), on[:40])


@needs_amx
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS], ids=lambda t: t.name)
def test_extreme_codes_and_scales_stay_exact(vnni, qtype):
    """Largest codes times largest scales (Q4_K 15 · 63; Q5_K 31 · 63; Q6_K 63 · 127 / -128; IQ4_XS -127 · -32 and 113 · 31)
    against activations of ±127:
    the 16-bit products split into bytes must reassemble to the exact integers."""
    n_in, n_out = 512, 32
    raw, _ = qref.random_weights(qtype, n_out, n_in, np.random.default_rng(3))
    blocks = np.frombuffer(raw, np.uint8).reshape(n_out, n_in // 256, -1).copy()
    if qtype == QT.Q4_K:  # d, dmin, 12 scale bytes, 128 code bytes
        blocks[:, :, 4:16] = 0xFF  # every 6-bit scale and min 63
        blocks[:16, :, 16:144] = 0xFF  # codes 15
    elif qtype == QT.Q5_K:  # d, dmin, 12 scale bytes, 32 qh bytes, 128 code bytes
        blocks[:, :, 4:16] = 0xFF
        blocks[:16, :, 16:176] = 0xFF  # codes 31
    elif qtype == QT.IQ4_XS:  # d, scales_h (u16), scales_l (4 bytes), 128 code bytes
        blocks[:16, :, 2:8] = 0  # every 6-bit scale 0: -32
        blocks[:16, :, 8:] = 0  # nibble 0: -127
        blocks[16:, :, 2:8] = 0xFF  # 63 - 32 = 31
        blocks[16:, :, 8:] = 0xFF  # nibble 15: 113
    else:  # 128 ql, 64 qh, 16 int8 scales, d
        blocks[:, :, :192] = 0xFF  # codes 63
        blocks[:16, :, 192:208] = np.uint8(0x80)  # scale -128
        blocks[16:, :, 192:208] = 0x7F  # scale 127
    raw = blocks.tobytes()
    il = Q.interleave(int(qtype), raw, n_in, n_out)
    x = np.where(np.arange(n_in) % 3 == 0, 1.0, -1.0).astype(np.float32)[None, :].repeat(20, 0)
    x[1] = 1.0
    x[2] = -1.0
    on, off = amx_and_zmm(lambda: Q.matmul(int(qtype), il, n_in, n_out, x, interleaved=True))
    np.testing.assert_array_equal(on.view(np.uint32), off.view(np.uint32))
    Q.set_isa("scalar")
    np.testing.assert_array_equal(on, Q.matmul(int(qtype), il, n_in, n_out, x, interleaved=True))


@needs_amx
def test_thread_counts_and_group_splits_bit_identical(vnni):
    rng = np.random.default_rng(11)
    for qtype in AMX_TYPES:
        n_in, n_out = (768 if qtype in qref.KQUANTS else 224), 16 * 13
        raw, _ = qref.random_weights(qtype, n_out, n_in, rng)
        il = Q.interleave(int(qtype), raw, n_in, n_out)
        x = rng.standard_normal((40, n_in)).astype(np.float32)
        y1 = Q.matmul(int(qtype), il, n_in, n_out, x, threads=1, interleaved=True)
        for t in (2, 3):
            np.testing.assert_array_equal(Q.matmul(int(qtype), il, n_in, n_out, x, threads=t, interleaved=True), y1)
        for r in (0, 17, 39):  # each row equals itself computed alone (one row: the zmm kernels)
            np.testing.assert_array_equal(Q.matmul(int(qtype), il, n_in, n_out, x[r:r + 1], interleaved=True)[0], y1[r])


def test_laneserve_amx_0_never_asks_for_tiles():
    """LANESERVE_AMX=0: no tile permission request, no probe, no tile kernels in the process."""
    code = ("import lanes._runtime as rt; "
            "print(rt.cpu_features()['usable']['amx_int8'], rt.quant.amx_available(), rt.quant.set_amx(True))")
    env = dict(os.environ, LANESERVE_AMX="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False", "False"]
