"""Runtime speed: prefill tok/s (128-token prompt) and decode tok/s (128 tokens), 1 and 2 threads.

If llama-cpp-python is importable, it runs on the same file in the same run, alternating with
ours, and the summary line carries our/its ratios (see benchmarks/README.md to install it).
With --ik-llama-bench PATH (a built `llama-bench` of ik_llama.cpp, benchmarks/README.md says how),
that runs in the same rounds too (one `-r 1` run per round, same prompt and decode lengths).

    python benchmarks/runtime_bench.py [MODEL_OR_PATH] [--rounds N] [--threads 1,2] [--ik-llama-bench PATH]
    python benchmarks/runtime_bench.py [MODEL_OR_PATH] --depths 512,2048,4096 [--threads 2]

--depths measures instead decode tok/s after a context of each given number of tokens (64
decoded tokens; the context is prefilled once per engine and depth, and each round rewinds to it),
against llama.cpp only (--ik-llama-bench is not used there).
Prints per-measurement lines, then ONE summary line starting with "runtime_bench:".
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from lanes import Model, find_model_file

N_PROMPT = 128
N_DECODE = 128
N_DEPTH_DECODE = 64


def prompt_ids(n_vocab: int, n: int = N_PROMPT) -> list[int]:
    # Deterministic, ordinary-looking ids (avoid control tokens at the start of the vocab).
    return [1000 + (i * 7919) % (min(n_vocab, 30000) - 1000) for i in range(n)]


def ours(model: Model, ids: list[int]) -> tuple[float, float]:
    # Prefill: the whole prompt in one batch, logits for the last row only (as llama-bench pp).
    first = model.generate(ids, max_tokens=1, temperature=0.0, ignore_eos=True)
    for _ in first:
        pass
    # Count only the prompt tokens computed: the engine reuses K/V of a prefix the previous call left.
    n_computed = N_PROMPT - first.stats.cached_tokens
    pp_ns = first.stats.prefill_ns
    gen = model.generate(ids[:1], max_tokens=N_DECODE, temperature=0.0, ignore_eos=True)
    for _ in gen:
        pass
    assert gen.stats.completion_tokens == N_DECODE
    # decode_ns covers the N_DECODE-1 single-token forwards after the first.
    return n_computed / (pp_ns / 1e9), (N_DECODE - 1) / (gen.stats.decode_ns / 1e9)


def theirs(llm, ids: list[int]) -> tuple[float, float]:
    llm.reset()
    t0 = time.perf_counter_ns()
    llm.eval(ids)
    pp_ns = time.perf_counter_ns() - t0
    llm.reset()
    llm.eval(ids[:1])
    t0 = time.perf_counter_ns()
    for _ in range(N_DECODE - 1):
        tok = llm.sample(top_k=1)
        llm.eval([tok])
    tg_ns = time.perf_counter_ns() - t0
    return N_PROMPT / (pp_ns / 1e9), (N_DECODE - 1) / (tg_ns / 1e9)


def llama_bench(bench: str, path: str, threads: int) -> tuple[float, float]:
    """One run of a built `llama-bench` (llama.cpp's or ik_llama.cpp's): pp and tg tests, its own tok/s figures."""
    out = subprocess.run([bench, "-m", path, "-p", str(N_PROMPT), "-n", str(N_DECODE), "-t", str(threads),
                          "-r", "1", "-o", "json"], check=True, capture_output=True, text=True, timeout=600).stdout
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == N_PROMPT and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_prompt"] == 0 and r["n_gen"] == N_DECODE)
    return float(pp), float(tg)


def ours_at_depth(model: Model, ids: list[int]) -> float:
    # The engine reuses the cached prompt prefix, so a repeated call re-runs only the last
    # prompt token before decoding.
    gen = model.generate(ids, max_tokens=N_DEPTH_DECODE, temperature=0.0, ignore_eos=True)
    for _ in gen:
        pass
    assert gen.stats.completion_tokens == N_DEPTH_DECODE
    return (N_DEPTH_DECODE - 1) / (gen.stats.decode_ns / 1e9)


def theirs_at_depth(llm, ids: list[int]) -> float:
    # Rewind to the context minus its last token (eval drops the cache beyond n_tokens), re-run
    # that token, then decode: the same work as ours_at_depth.
    if llm.n_tokens < len(ids) - 1 or list(llm.input_ids[: len(ids) - 1]) != ids[:-1]:
        llm.reset()
        llm.eval(ids[:-1])
    llm.n_tokens = len(ids) - 1
    llm.eval(ids[-1:])
    t0 = time.perf_counter_ns()
    for _ in range(N_DEPTH_DECODE - 1):
        tok = llm.sample(top_k=1)
        llm.eval([tok])
    return (N_DEPTH_DECODE - 1) / ((time.perf_counter_ns() - t0) / 1e9)


def depth_runs(path: str, threads: int, depths: list[int], rounds: int, llama_cpp) -> list[str]:
    ctx = max(depths) + N_DEPTH_DECODE + 64
    m = Model(path, threads=threads, ctx_size=ctx)
    llm = None
    if llama_cpp is not None:
        llm = llama_cpp.Llama(path, n_threads=threads, n_threads_batch=threads, n_ctx=ctx, n_batch=512,
                              verbose=False, logits_all=False)
    parts = []
    for depth in depths:
        ids = prompt_ids(m.n_vocab, depth)
        res: dict[str, list[float]] = {"ours": [], "llama.cpp": []}
        ours_at_depth(m, ids)  # prefill once (and warm up)
        if llm is not None:
            theirs_at_depth(llm, ids)
        for _ in range(rounds):  # alternate so machine noise hits both alike
            res["ours"].append(ours_at_depth(m, ids))
            if llm is not None:
                res["llama.cpp"].append(theirs_at_depth(llm, ids))
        # Medians, and best rounds (on a shared machine the best round is the least disturbed).
        line = f"threads={threads} depth={depth}"
        med = {who: statistics.median(runs) for who, runs in res.items() if runs}
        best = {who: max(runs) for who, runs in res.items() if runs}
        for who, tg in med.items():
            runs = ", ".join(f"{x:.1f}" for x in res[who])
            print(f"{who:10s} threads={threads} depth={depth:5d} tg{N_DEPTH_DECODE}={tg:7.1f} tok/s (rounds: {runs})")
            line += f" {who}:tg={tg:.1f},best={best[who]:.1f}"
        if "llama.cpp" in med:
            line += (f" ours/llama.cpp:tg={med['ours'] / med['llama.cpp']:.2f}x,"
                     f"best={best['ours'] / best['llama.cpp']:.2f}x")
        parts.append(line)
    del m, llm
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--depths", default="", help="comma-separated context lengths: decode speed after each")
    ap.add_argument("--ik-llama-bench", metavar="PATH", help="ik_llama.cpp's built llama-bench, run in the same rounds")
    args = ap.parse_args()
    path = str(find_model_file(args.model))
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        llama_cpp = None

    summary = []
    if args.depths:
        depths = [int(d) for d in args.depths.split(",")]
        for threads in [int(t) for t in args.threads.split(",")]:
            summary += depth_runs(path, threads, depths, args.rounds, llama_cpp)
        print(f"runtime_bench: model={args.model} " + " | ".join(summary))
        return
    for threads in [int(t) for t in args.threads.split(",")]:
        m = Model(path, threads=threads, ctx_size=1024)
        ids = prompt_ids(m.n_vocab)
        llm = None
        if llama_cpp is not None:
            llm = llama_cpp.Llama(path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
                                  verbose=False, logits_all=False)
        res = {"ours": [], "llama.cpp": [], "ik_llama": []}
        ours(m, ids)  # warm-up: page in the weights
        if llm is not None:
            theirs(llm, ids)
        for _ in range(args.rounds):  # alternate so machine noise hits both alike
            res["ours"].append(ours(m, ids))
            if llm is not None:
                res["llama.cpp"].append(theirs(llm, ids))
            if args.ik_llama_bench:
                res["ik_llama"].append(llama_bench(args.ik_llama_bench, path, threads))
        line = f"threads={threads}"
        med = {}
        for who, runs in res.items():
            if not runs:
                continue
            pp = statistics.median(r[0] for r in runs)
            tg = statistics.median(r[1] for r in runs)
            med[who] = (pp, tg)
            print(f"{who:10s} threads={threads} pp{N_PROMPT}={pp:8.1f} tok/s  tg{N_DECODE}={tg:7.1f} tok/s")
            line += f" {who}:pp={pp:.1f},tg={tg:.1f}"
        for who in ("llama.cpp", "ik_llama"):
            if who in med:
                line += (f" ours/{who}:pp={med['ours'][0] / med[who][0]:.2f}x,"
                         f"tg={med['ours'][1] / med[who][1]:.2f}x")
        summary.append(line)
        del m, llm
    print(f"runtime_bench: model={args.model} " + " | ".join(summary))


if __name__ == "__main__":
    main()
