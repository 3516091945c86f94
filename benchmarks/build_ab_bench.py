"""Decode tok/s at given context depths of this tree's build against another build, in the same run.

Each round runs one worker process per build (ours, then the other, then the other way round in
the next round, so drift in machine load hits both alike); a worker loads the model, prefills the
context once and measures runtime_bench's depth decode (64 tokens, rewound to the context).
--engine batch measures the lanes' BatchEngine instead (one slot; the repeated prompt is served from
its cached prefix, then 64 tokens are decoded): the path a server runs, with its page tables.

    python benchmarks/build_ab_bench.py --base DIR [MODEL_OR_PATH] [--depths 512,2048] [--threads 2] [--rounds 5]
                                        [--cpu-time] [--engine model|batch]

DIR holds the other build's `lanes` package (with its compiled `_runtime`), e.g. a checkout of
main built in place. Prints one line per build and depth, then ONE summary line starting with
"build_ab_bench:" carrying ours/base ratios of the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

WORKER = """
import json, sys, time
sys.path.insert(0, {bench!r})
from runtime_bench import N_DEPTH_DECODE, ours_at_depth, prompt_ids
from lanes import Model, find_model_file
m = Model(find_model_file({model!r}), threads={threads}, ctx_size={ctx}, max_batch=512)
out = {{}}
for depth in {depths!r}:
    ids = prompt_ids(m.n_vocab, depth)
    ours_at_depth(m, ids)  # prefill once and warm up
    t0 = time.process_time()
    tps = ours_at_depth(m, ids)
    # CPU time: the last context token and the decodes, per process CPU second (all its threads)
    out[depth] = N_DEPTH_DECODE / (time.process_time() - t0) if {cpu} else tps
print(json.dumps(out))
"""

BATCH_WORKER = """
import json, sys, time
sys.path.insert(0, {bench!r})
from runtime_bench import N_DEPTH_DECODE, prompt_ids
from lanes import _runtime, find_model_file
eng = _runtime.BatchEngine(str(find_model_file({model!r})), threads={threads}, ctx_size={ctx}, num_slots=1,
                           max_batch_tokens=512)

def run(ids):
    eng.add(1, 0, ids, N_DEPTH_DECODE, temperature=0.0, ignore_eos=True)
    stats = None
    t0 = time.process_time()
    while eng.has_work():
        for _r, _c, _t, done, _reason, st in eng.step():
            stats = st if done else stats
    assert stats["completion_tokens"] == N_DEPTH_DECODE
    return stats, time.process_time() - t0

out = {{}}
for depth in {depths!r}:
    ids = prompt_ids(30000, depth)  # the ids runtime_bench uses for any vocabulary of 30000 or more
    run(ids)  # prefill once (cached for the next run) and warm up
    stats, cpu_s = run(ids)
    out[depth] = N_DEPTH_DECODE / cpu_s if {cpu} else (N_DEPTH_DECODE - 1) / (stats["decode_ns"] / 1e9)
print(json.dumps(out))
"""


def measure(pythonpath: str, model: str, threads: int, depths: list[int], cpu: bool, engine: str) -> dict[int, float]:
    code = (BATCH_WORKER if engine == "batch" else WORKER).format(bench=str(HERE), model=model, threads=threads, ctx=max(depths) + 128, depths=depths, cpu=cpu)
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/tmp", capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--base", required=True, help="directory holding the other build's lanes package")
    ap.add_argument("--depths", default="512,2048")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu-time", action="store_true",
                    help="tokens per process CPU second instead of per wall second (a loaded machine; use --threads 1)")
    ap.add_argument("--engine", choices=("model", "batch"), default="model",
                    help="model: the single-sequence Model; batch: the lanes' BatchEngine (one slot)")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    builds = {"ours": str(ROOT), "base": str(Path(args.base).resolve())}
    runs: dict[str, dict[int, list[float]]] = {b: {d: [] for d in depths} for b in builds}
    for r in range(args.rounds):
        for name in (["ours", "base"] if r % 2 == 0 else ["base", "ours"]):
            for d, tps in measure(builds[name], args.model, args.threads, depths, args.cpu_time, args.engine).items():
                runs[name][d].append(tps)
    parts = []
    for d in depths:
        med = {b: statistics.median(runs[b][d]) for b in builds}
        for b in builds:
            print(f"{b:5s} threads={args.threads} depth={d:5d} tg64={med[b]:7.1f} tok/s{' (CPU)' if args.cpu_time else ''} "
                  f"(rounds: {', '.join(f'{x:.1f}' for x in runs[b][d])})")
        parts.append(f"depth={d} ours={med['ours']:.1f} base={med['base']:.1f} ratio={med['ours'] / med['base']:.3f}")
    unit = "cpu" if args.cpu_time else "wall"
    print(f"build_ab_bench: {args.model} engine={args.engine} threads={args.threads} {unit} rounds={args.rounds} "
          + " ".join(parts))


if __name__ == "__main__":
    main()
