"""Speed at real model shapes: Llama-3.2-1B, Llama-3.2-3B, a Qwen3-30B-A3B-shaped MoE and a gpt-oss-20b-shaped
MoE, ours vs llama.cpp (and ik_llama.cpp), prefill and decode, with decode's achieved bytes/s against measured
copy bandwidth.

    python benchmarks/shapes_bench.py [--llama-bin /work/llama-build/build/bin] [--ik-llama-bench PATH]
        [--shapes 1b,3b,moe,gptoss] [--quants Q4_K_M,Q4_0] [--rounds 3] [--threads 2] [--moe-layers 16]
        [--gptoss-layers 8] [--cache-dir DIR]

Weights are random (speed does not depend on their values); the files are written by shape_gguf.py. 1B and 3B
are written once as F16 GGUFs under --cache-dir (not the repository), quantized there by llama.cpp (its
llama-quantize in --llama-bin, or when that is not built, the same llama_model_quantize through
llama-cpp-python), and the F16 file is deleted once every quantization exists. The MoE keeps Qwen3-30B-A3B's
per-layer shape (d 2048, 32/4 heads of 128, 128 experts of width 768, 8 used, vocab 151936, untied LM head)
with --moe-layers of its 48 layers (default 16: all 48 are ~18 GB at Q4_K_M, and our engine's repacked copy
needs as much again, on a 24 GiB machine; the F16 intermediate of 48 layers is 61 GB); the gpt-oss shape keeps
--gptoss-layers of gpt-oss-20b's 24 (default 8: its experts are 0.42 GB a layer in MXFP4) and is always
MXFP4_MOE. Both are written already quantized (--write-quantized): every tensor gets the type llama-quantize
gives it for that file type (file_type; equal on a small MoE file, and for MXFP4_MOE on the tiny gpt-oss file
of tests/csrc/model), with random blocks whose scales are small and finite.

Per round, for each file: ours through lanes.Model (runtime_bench.ours: 128-token prompt in one batch,
then 128 decoded tokens), llama.cpp's `llama-bench -p 128 -n 128 -t T -r 1` (when --llama-bin has none:
llama-cpp-python on that build's libllama.so, LLAMA_CPP_LIB_PATH, runtime_bench.theirs), then ik_llama.cpp's
llama-bench if given (llama-bench with its default options). Medians over rounds. Copy bandwidth is
measured in the same run before and after the rounds: numpy copies of a 1 GiB array split over T threads (numpy releases the GIL while
copying), counted as bytes read + bytes written per second (STREAM "copy" convention); the best of 5. Read bandwidth,
measured beside it, is a numpy max over the same size in T threads (bytes read per second, best of 5): decode
only reads weights, and on a machine whose copy figure counts writes that a pure read stream cannot turn into
reads (seen: read 35.6 GB/s against copy 51.3 GB/s, 2 threads) it is the ceiling decode can approach.
Decode bytes/token = the bytes of every weight a token reads (all tensors except the embedding table, which
is read one row per token unless it is also the LM head; MoE experts at n_used/n_expert of their bytes).
Prints the table, then ONE summary line starting with "shapes_bench:".
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_bench import N_PROMPT, llama_bench, ours, prompt_ids, theirs  # noqa: E402
from shape_gguf import ONLY_QUANTS, model_files, shapes  # noqa: E402

from lanes import Model  # noqa: E402


def decode_bytes_per_token(path: Path) -> int:
    r = gguf.GGUFReader(str(path))
    n_expert = int(r.fields[f"{r.fields['general.architecture'].contents()}.expert_count"].contents()) \
        if any(k.endswith(".expert_count") for k in r.fields) else 0
    n_used = int(next(f.contents() for k, f in r.fields.items() if k.endswith(".expert_used_count"))) \
        if n_expert else 0
    tied = not any(t.name == "output.weight" for t in r.tensors)
    total = 0
    for t in r.tensors:
        nbytes = int(t.n_bytes)
        if t.name == "token_embd.weight" and not tied:
            nbytes //= int(t.shape[-1])  # one row of the table (gguf-py lists ne[0] first)
        elif "_exps." in t.name:
            nbytes = nbytes * n_used // n_expert
        total += nbytes
    return total


def _threaded_best(threads: int, nbytes: int, reps: int, make_work) -> float:
    """Best nbytes / seconds of make_work(a, b) run over the element ranges of `threads` equal parts."""
    parts = np.array_split(np.arange(nbytes // 8), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
    best = 0.0
    for _ in range(reps):
        workers = [threading.Thread(target=make_work(a, b)) for a, b in bounds]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, nbytes / (time.perf_counter() - t0))
    return best


def copy_bandwidth(threads: int, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Best bytes (read + written) per second of a numpy copy of nbytes split over `threads` threads."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    return 2 * _threaded_best(threads, nbytes, reps, lambda a, b: lambda: np.copyto(dst[a:b], src[a:b]))


def read_bandwidth(threads: int, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Best bytes read per second of a numpy max over nbytes of uint64 split over `threads` threads: the
    ceiling of a pure weight stream (decode reads and never writes weights). numpy's SIMD max keeps up with
    memory here, matching a hand-written AVX-512 read loop on this machine (35.6 vs 35.3 GB/s, 2 threads)."""
    src = np.ones(nbytes // 8, dtype=np.uint64)
    return _threaded_best(threads, nbytes, reps, lambda a, b: lambda: src[a:b].max())


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", type=Path, default=Path("/work/llama-build/build/bin"),
                    help="llama.cpp's build output: llama-quantize, llama-bench, or libllama.so for llama-cpp-python")
    ap.add_argument("--ik-llama-bench", metavar="PATH", help="ik_llama.cpp's built llama-bench")
    ap.add_argument("--shapes", default="1b,3b,moe")
    ap.add_argument("--quants", default="Q4_K_M,Q4_0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--moe-layers", type=int, default=16)
    ap.add_argument("--gptoss-layers", type=int, default=8)
    ap.add_argument("--write-quantized", default="moe,gptoss",
                    help="shapes written already quantized (llama-quantize's tensor types, random blocks) instead of "
                         "F16 + llama-quantize; empty for none")
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/laneserve-shapes-bench"))
    args = ap.parse_args()
    os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(args.llama_bin))
    all_shapes = shapes(args.moe_layers, args.gptoss_layers)
    quants = args.quants.split(",")
    files = {}
    for name in args.shapes.split(","):
        direct = name in args.write_quantized.split(",")
        for q, path in model_files(all_shapes[name], name, ONLY_QUANTS.get(name, quants), args.cache_dir,
                                   args.llama_bin, direct).items():
            files[f"{name} {q}"] = path
    bw = [copy_bandwidth(args.threads)]
    rbw = [read_bandwidth(args.threads)]
    loads = [load_average()]
    rows = []
    for label, path in files.items():
        rows.append(measure(label, path, args))
        loads.append(load_average())
    bw.append(copy_bandwidth(args.threads))
    rbw.append(read_bandwidth(args.threads))
    print_table(rows, max(bw), max(rbw), args.threads, loads)


def measure(label: str, path: Path, args) -> dict:
    m = Model(path, threads=args.threads, ctx_size=1024)
    ids = prompt_ids(m.n_vocab)
    engines = {"ours": lambda: ours(m, ids)}
    if (args.llama_bin / "llama-bench").exists():
        engines["llama.cpp"] = lambda: llama_bench(str(args.llama_bin / "llama-bench"), str(path), args.threads)
    else:
        import llama_cpp
        llm = llama_cpp.Llama(str(path), n_threads=args.threads, n_threads_batch=args.threads, n_ctx=1024,
                              n_batch=512, verbose=False)
        theirs(llm, ids)  # warm-up
        engines["llama.cpp"] = lambda: theirs(llm, ids)
    if args.ik_llama_bench:
        engines["ik_llama"] = lambda: llama_bench(args.ik_llama_bench, str(path), args.threads)
    ours(m, ids)  # warm-up: page the weights in
    res: dict[str, list[tuple[float, float]]] = {who: [] for who in engines}
    for rnd in range(args.rounds):  # alternate so machine noise hits every engine alike
        for who, run in engines.items():
            res[who].append(run())
            print(f"{label:12s} round {rnd + 1} {who:9s} pp{N_PROMPT} {res[who][-1][0]:.1f} tok/s, "
                  f"tg {res[who][-1][1]:.2f} tok/s, load average {load_average()}", flush=True)
    del m, engines
    med = {who: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
           for who, runs in res.items()}
    for who, runs in res.items():
        print(f"{label:12s} {who:9s} pp{N_PROMPT} " + ", ".join(f"{r[0]:.1f}" for r in runs)
              + "  tg " + ", ".join(f"{r[1]:.2f}" for r in runs), flush=True)
    return {"label": label, "med": med, "bytes": decode_bytes_per_token(path), "size": path.stat().st_size}


def print_table(rows: list[dict], bw: float, rbw: float, threads: int, loads: list[str]) -> None:
    print(f"\ncopy bandwidth ({threads} threads, read+write): {bw / 1e9:.1f} GB/s; read bandwidth: {rbw / 1e9:.1f} GB/s; "
          "load average during run: " + " | ".join(loads))
    print("| model | file GB | engine | pp128 tok/s | tg128 tok/s | decode GB/s | of copy bw | of read bw | ours/it pp "
          "| ours/it tg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    for row in rows:
        ours_pp, ours_tg = row["med"]["ours"]
        part = [row["label"].replace(" ", ":")]
        for who, (pp, tg) in row["med"].items():
            gbs = row["bytes"] * tg / 1e9
            ratio = "" if who == "ours" else f"{ours_pp / pp:.2f}× | {ours_tg / tg:.2f}×"
            print(f"| {row['label']} | {row['size'] / 1e9:.2f} | {who} | {pp:.1f} | {tg:.2f} | {gbs:.1f} | "
                  f"{100 * row['bytes'] * tg / bw:.0f}% | {100 * row['bytes'] * tg / rbw:.0f}% | {ratio or '— | —'} |")
            if who != "ours":
                part.append(f"{who}:pp={ours_pp / pp:.2f}x,tg={ours_tg / tg:.2f}x")
        part.append(f"ours_bw={100 * row['bytes'] * ours_tg / bw:.0f}%(read {100 * row['bytes'] * ours_tg / rbw:.0f}%)")
        summary.append(" ".join(part))
    print(f"shapes_bench: threads={threads} copy_bw={bw / 1e9:.1f}GB/s read_bw={rbw / 1e9:.1f}GB/s " + " | ".join(summary))


if __name__ == "__main__":
    main()
