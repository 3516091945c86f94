"""GEMV and GEMM micro benchmark for the quant kernels on SmolLM2-like shapes (not a test).

Each shape cycles through enough distinct weight copies (>= 128 MiB) that the weights stream
from DRAM as in real decode; GB/s counts weight bytes only; times are the best of --trials
wall-clock trials (the machine is shared; interference only ever adds time). Prints one summary line per
ISA x thread count, plus a final line with the SmolLM2 decode estimate per token
(30 layers x Q4_1 matrices + the Q8_0 LM head), e.g.
  avx512_vnni t2: q4_1 576x576 0.021ms 9.9GB/s | ... | smollm2 token 6.1ms
and finally ONE summary line starting with "kernel_bench:" (token ms per ISA and thread count).
With --gemm-rows N (e.g. 128 = a prefill chunk, 8 = a batch-8 decode step) it instead times
N-row matrix × matrix products, cache-resident, for the original row layout and the
row-interleaved layout the model repacks into, in the same run: process CPU seconds per call
(steadier than wall time on a shared machine), GMAC/s per CPU second, and the ratio; the summary
line carries the SmolLM2 layer matmuls per N rows for both layouts. --gemm-types (with --gemm-shape)
times those weight types on one shape instead of the SmolLM2 matrices, e.g.
  --gemm-rows 128 --gemm-types q2_k q3_k iq4_nl iq4_xs q4_k --gemm-shape 2048x2048 --threads 1
Usage: python benchmarks/kernel_bench.py [--isa NAME ...] [--threads 1 2] [--iters N] [--gemm-rows N]
       [--gemm-types NAME ...] [--gemm-shape NINxNOUT]
"""
import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a source checkout
import lanes._runtime as rt  # noqa: E402

Q = rt.quant
Q4_1, Q8_0 = 3, 8
ROW_BYTES = {Q4_1: lambda n: n // 32 * 20, Q8_0: lambda n: n // 32 * 34}
# (label, type, n_in, n_out, uses per SmolLM2 token)
SHAPES = [
    ("q4_1 576x576", Q4_1, 576, 576, 30 * 2),      # attn_q, attn_output
    ("q4_1 576x192", Q4_1, 576, 192, 30 * 2),      # attn_k, attn_v
    ("q4_1 576x1536", Q4_1, 576, 1536, 30 * 2),    # ffn_gate, ffn_up
    ("q4_1 1536x576", Q4_1, 1536, 576, 30),        # ffn_down
    ("q8_0 576x49152", Q8_0, 576, 49152, 1),       # tied LM head
]
WORKING_SET = 128 << 20
# --gemm-types: ggml type id, block elements, block bytes, offsets of the fp16 scale fields (made finite).
TYPES = {"q4_0": (2, 32, 18, (0,)), "q4_1": (3, 32, 20, (0, 2)), "q8_0": (8, 32, 34, (0,)),
         "q2_k": (10, 256, 84, (80, 82)), "q3_k": (11, 256, 110, (108,)), "q4_k": (12, 256, 144, (0, 2)),
         "q5_k": (13, 256, 176, (0, 2)), "q6_k": (14, 256, 210, (208,)), "iq4_nl": (20, 32, 18, (0,)),
         "iq4_xs": (23, 256, 136, (0,)), "mxfp4": (39, 32, 17, ())}  # mxfp4: its E8M0 byte set below


def typed_shapes(args, rng):
    """(label, type, n_in, n_out, 1) per --gemm-types entry, and its random weights (finite scales)."""
    n_in, n_out = (int(v) for v in args.gemm_shape.split("x"))
    shapes, bufs = [], {}
    for name in args.gemm_types:
        qt, be, bb, fields = TYPES[name]
        blocks = rng.integers(0, 256, size=(n_in * n_out // be, bb), dtype=np.uint8)
        for off in fields:
            blocks[:, off:off + 2] = (rng.uniform(-1, 1, size=(blocks.shape[0], 1)) * 0.01).astype(np.float16).view(np.uint8)
        if name == "mxfp4":
            blocks[:, 0] = rng.integers(116, 128, size=blocks.shape[0])  # scales 2^-12 .. 2^-1
        label = f"{name} {n_in}x{n_out}"
        shapes.append((label, qt, n_in, n_out, 1))
        bufs[label] = blocks.reshape(-1)
    return shapes, bufs


def weights_for(qtype, n_in, n_out, rng):
    mat = ROW_BYTES[qtype](n_in) * n_out
    copies = max(1, -(-WORKING_SET // mat))
    buf = rng.integers(0, 256, size=copies * mat, dtype=np.uint8)
    # Make the fp16 scale fields finite and small (block starts every block_bytes).
    bb = 20 if qtype == Q4_1 else 34
    blocks = buf.reshape(-1, bb)
    scales = (rng.uniform(-1, 1, size=(blocks.shape[0], 2)) * 0.01).astype(np.float16)
    blocks[:, 0:2] = scales[:, :1].view(np.uint8)
    if qtype == Q4_1:
        blocks[:, 2:4] = scales[:, 1:].view(np.uint8)
    return buf, mat


def gemm(args, rng):
    before = Q.active_isa()
    rows, summary = args.gemm_rows, []
    typed, typed_bufs = typed_shapes(args, rng) if args.gemm_types else (None, {})
    for isa in args.isa or Q.usable_isas():
        if not Q.set_isa(isa):
            continue
        for t in args.threads:
            total = {"rows": 0.0, "interleaved": 0.0}
            # The layer matrices (prompt rows skip the LM head), or the --gemm-types ones.
            for label, qt, n_in, n_out, uses in typed or SHAPES[:-1]:
                if typed:
                    w = typed_bufs[label]
                else:
                    w, _ = weights_for(qt, n_in, n_out, rng)
                    w = w[:ROW_BYTES[qt](n_in) * n_out]
                bufs = {"rows": w, "interleaved": Q.interleave(qt, w, n_in, n_out)}
                iters = args.iters or max(3, int(1e8 / (n_in * n_out * rows)))
                cpu = {}
                for lay, buf in bufs.items():
                    il = lay == "interleaved"
                    cpu[lay] = min(Q.bench_matmul(qt, buf, n_in, n_out, rows, t, iters, il)[1] for _ in range(args.trials))
                    total[lay] += cpu[lay] * uses
                gmac = n_in * n_out * rows / 1e9
                print(f"{isa} t{t} {label} x{rows}: rows {gmac / cpu['rows']:.1f} | interleaved "
                      f"{gmac / cpu['interleaved']:.1f} GMAC/s-cpu | x{cpu['rows'] / cpu['interleaved']:.2f}", flush=True)
            summary.append(f"{isa}/t{t} rows {total['rows'] * 1e3:.1f}ms interleaved {total['interleaved'] * 1e3:.1f}ms "
                           f"(x{total['rows'] / total['interleaved']:.2f})")
    Q.set_isa(before)
    what = "the --gemm-types matrices" if typed else "smollm2 layer matmuls"
    print(f"kernel_bench: {what} per {rows} rows (CPU time, cache-resident): " + ", ".join(summary))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", nargs="*", default=None)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--iters", type=int, default=0, help="calls per trial (default: ~30 ms worth)")
    ap.add_argument("--trials", type=int, default=7, help="trials per shape; the best is reported")
    ap.add_argument("--gemm-rows", type=int, default=0, help="time N-row products, row vs interleaved layout")
    ap.add_argument("--gemm-types", nargs="*", choices=sorted(TYPES), default=None,
                    help="with --gemm-rows: these weight types on --gemm-shape instead of the SmolLM2 matrices")
    ap.add_argument("--gemm-shape", default="2048x2048", help="n_in x n_out for --gemm-types")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    if args.gemm_rows > 0:
        gemm(args, rng)
        return
    bufs = {s[0]: weights_for(s[1], s[2], s[3], rng) for s in SHAPES}
    before = Q.active_isa()
    summary = []
    for isa in args.isa or Q.usable_isas():
        if not Q.set_isa(isa):
            print(f"{isa}: not usable here")
            continue
        for t in args.threads:
            parts, token_ms = [], 0.0
            for label, qt, n_in, n_out, uses in SHAPES:
                buf, mat = bufs[label]
                iters = args.iters or max(5, int(3e8 / mat))  # ~30 ms per trial at 10 GB/s
                # Best of several trials: the machine is shared, interference only adds time.
                sec = min(Q.bench_matmul(qt, buf, n_in, n_out, 1, t, iters)[0] for _ in range(args.trials))
                token_ms += sec * 1e3 * uses
                parts.append(f"{label} {sec * 1e3:.3f}ms {mat / sec / 1e9:.1f}GB/s")
            print(f"{isa} t{t}: " + " | ".join(parts) + f" | smollm2 token {token_ms:.2f}ms", flush=True)
            summary.append(f"{isa}/t{t} {token_ms:.2f}ms")
    Q.set_isa(before)
    print("kernel_bench: smollm2 matmuls per token (GEMV, DRAM-streamed): " + ", ".join(summary))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.1f}s")
