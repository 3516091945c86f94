"""NumPy references for the quant kernel tests: random weights, exact emulation of the
runtime's activation quantizers, and float64 reference products."""
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

SIMPLE = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.IQ4_NL, QT.MXFP4]
KQUANTS = [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q2_K, QT.Q3_K, QT.IQ4_XS]  # 256-element blocks, Q8_K activations
FLOATS = [QT.F32, QT.F16, QT.BF16]
ALL_TYPES = FLOATS + SIMPLE + KQUANTS

BLOCK = {QT.F32: 1, QT.F16: 1, QT.BF16: 1, QT.Q8_0: 32, QT.Q4_0: 32, QT.Q4_1: 32, QT.Q5_0: 32,
         QT.Q5_1: 32, QT.IQ4_NL: 32, QT.MXFP4: 32, QT.Q4_K: 256, QT.Q5_K: 256, QT.Q6_K: 256, QT.Q2_K: 256, QT.Q3_K: 256,
         QT.IQ4_XS: 256}
BLOCK_BYTES = {QT.Q8_0: 34, QT.Q4_0: 18, QT.Q4_1: 20, QT.Q5_0: 22, QT.Q5_1: 24, QT.IQ4_NL: 18, QT.MXFP4: 17,
               QT.Q4_K: 144, QT.Q5_K: 176, QT.Q6_K: 210, QT.Q2_K: 84, QT.Q3_K: 110, QT.IQ4_XS: 136}
# Offsets of the fp16 scale fields inside a block of the types written as random bytes (every
# other byte pattern is a valid block; the gguf package has no quantizer for these types).
K_SCALE_OFFSETS = {QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,), QT.Q2_K: (80, 82), QT.Q3_K: (108,),
                   QT.IQ4_XS: (0,), QT.IQ4_NL: (0,)}


def random_weights(qtype, n_out, n_in, rng):
    """(raw bytes, ndarray the gguf package dequantizes) for an n_out x n_in weight matrix."""
    if qtype == QT.MXFP4:  # random codes; E8M0 scales around 2^-6, one block in 16 with a denormal scale (e < 2)
        nb = n_out * n_in // 32
        blocks = rng.integers(0, 256, size=(nb, 17), dtype=np.uint8)
        blocks[:, 0] = np.where(rng.integers(0, 16, size=nb) == 0, rng.integers(0, 3, size=nb),
                                rng.integers(116, 128, size=nb))
        arr = blocks.reshape(n_out, -1)
        return arr.tobytes(), arr
    if qtype in K_SCALE_OFFSETS:
        nb = n_out * n_in // BLOCK[qtype]
        blocks = rng.integers(0, 256, size=(nb, BLOCK_BYTES[qtype]), dtype=np.uint8)
        for off in K_SCALE_OFFSETS[qtype]:
            scale = (rng.uniform(-1, 1, size=nb) * 0.02).astype(np.float16)
            blocks[:, off:off + 2] = scale.view(np.uint8).reshape(nb, 2)
        arr = blocks.reshape(n_out, -1)
        return arr.tobytes(), arr
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    if qtype == QT.F32:
        return w.tobytes(), w
    arr = quants.quantize(w, qtype)
    return arr.tobytes(), arr


def dequantize(arr, qtype):
    return np.asarray(quants.dequantize(arr, qtype), dtype=np.float32)


def act_format(qtype):
    if qtype in (QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.IQ4_NL, QT.MXFP4):
        return "q8_0"
    if qtype in (QT.Q4_1, QT.Q5_1):
        return "q8_1"
    if qtype in KQUANTS:
        return "q8_k"
    return "f32"


def quantize_q8(x, with_sum):
    """Emulates the runtime's Q8_0/Q8_1 quantizer on rows of x (float32, (rows, n)).

    Returns the dequantized activations (q * fp16(d)) and, for Q8_1, the stored s = fp16(d*Σq)
    per block, both float64."""
    xb = x.reshape(x.shape[0], -1, 32).astype(np.float32)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * idv).astype(np.float32)
    dh = d.astype(np.float16).astype(np.float64)
    deq = (q.astype(np.float64) * dh).reshape(x.shape)
    s = None
    if with_sum:
        s = (d[..., 0] * q.sum(axis=-1, dtype=np.float32)).astype(np.float16).astype(np.float64)
    return deq, s, (dh[..., 0], q.sum(axis=-1).astype(np.float64))


def quantize_q8_k(x):
    """Emulates the runtime's Q8_K quantizer; returns dequantized activations (float64)."""
    xb = x.reshape(x.shape[0], -1, 256).astype(np.float32)
    idx = np.abs(xb).argmax(axis=-1)[..., None]
    mx = np.take_along_axis(xb, idx, axis=-1)
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
        d = np.where(mx != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    q = np.minimum(np.rint(xb * iscale), 127).astype(np.float64)
    return (q * d.astype(np.float64)).reshape(x.shape)


def reference_matmul(qtype, arr, x):
    """(y_ref, scale) for y = x @ W.T as the runtime computes it up to float summation order.

    scale = Σ|w_i·x_i| per output, the magnitude that float rounding errors are relative to."""
    n_out = arr.shape[0]
    w = dequantize(arr, qtype).reshape(n_out, -1).astype(np.float64)
    fmt = act_format(qtype)
    if fmt == "f32":
        xa = x.astype(np.float64)
        extra = 0.0
    elif fmt == "q8_k":
        xa = quantize_q8_k(x)
        extra = 0.0
    else:
        xa, s, (dh, qsum) = quantize_q8(x, fmt == "q8_1")
        extra = 0.0
        if fmt == "q8_1":
            # The runtime adds m_w·s with s rounded to fp16, not m_w·d·Σq exactly.
            raw = np.asarray(arr, dtype=np.uint8).reshape(n_out, -1, BLOCK_BYTES[qtype])
            m = raw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)  # (n_out, nb)
            extra = (s - dh * qsum) @ m.T
    y = xa @ w.T + extra
    scale = np.abs(xa) @ np.abs(w).T
    return y, scale
