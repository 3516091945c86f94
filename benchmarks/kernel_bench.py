"""GEMV micro benchmark for the quant kernels on SmolLM2-like shapes (not a test).

Each shape cycles through enough distinct weight copies (>= 128 MiB) that the weights stream
from DRAM as in real decode; GB/s counts weight bytes only; times are the best of --trials
wall-clock trials (the machine is shared; interference only ever adds time). Prints one summary line per
ISA x thread count, plus a final line with the SmolLM2 decode estimate per token
(30 layers x Q4_1 matrices + the Q8_0 LM head), e.g.
  avx512_vnni t2: q4_1 576x576 0.021ms 9.9GB/s | ... | smollm2 token 6.1ms
and finally ONE summary line starting with "kernel_bench:" (token ms per ISA and thread count).
Usage: python benchmarks/kernel_bench.py [--isa NAME ...] [--threads 1 2] [--iters N]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", nargs="*", default=None)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--iters", type=int, default=0, help="calls per trial (default: ~30 ms worth)")
    ap.add_argument("--trials", type=int, default=7, help="trials per shape; the best is reported")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
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
