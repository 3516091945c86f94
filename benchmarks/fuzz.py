"""Runs one fuzz target: `python benchmarks/fuzz.py TARGET MINUTES` (or --seconds S; --runs N; --list).

atheris (libFuzzer inside a Python extension, from PyPI) drives the target's one_input with
mutated inputs, starting from seeds built from the repository's real files and tests, the inputs
earlier runs found (WORK/TARGET/corpus, kept between runs) and the regression inputs of
tests/data/fuzz/TARGET. A crash, an unexpected exception, a hang beyond --timeout-s or a
sanitizer report (run under the ASan build: .ci/sanitize) stops the run; the input is saved as
WORK/TARGET/crash-* — copy it to tests/data/fuzz/TARGET/ with the fix so it replays in CI
(tests/fuzz/test_regressions.py). Prints one JSON line: executions, seconds, coverage, findings.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fuzzing.registry import TARGETS, target_named  # noqa: E402

REGRESSIONS = ROOT / "tests" / "data" / "fuzz"


def write_seeds(name: str, seed_dir: Path) -> int:
    seed_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for data in target_named(name).seeds():
        (seed_dir / hashlib.sha1(data).hexdigest()).write_bytes(data)
        n += 1
    return n


def parse_figures(log: str) -> dict:
    runs = re.findall(r"Done (\d+) runs in (\d+) second", log)
    cov = re.findall(r"\bcov: (\d+) ft: (\d+)", log)
    execs = re.findall(r"stat::number_of_executed_units: (\d+)", log)
    return {
        "executions": int(execs[-1]) if execs else (int(runs[-1][0]) if runs else None),
        "coverage_edges": int(cov[-1][0]) if cov else None,
        "features": int(cov[-1][1]) if cov else None,
        "corpus_inputs": int(m[-1]) if (m := re.findall(r"corp: (\d+)/", log)) else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", nargs="?")
    ap.add_argument("minutes", nargs="?", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, help="run time in seconds (overrides MINUTES)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/laneserve-fuzz"), help="corpus and crash directory")
    ap.add_argument("--runs", type=int, help="stop after this many executions (libFuzzer -runs), or at the time")
    ap.add_argument("--timeout-s", type=int, default=10, help="one input running longer is a hang")
    ap.add_argument("--rss-limit-mb", type=int, default=4096)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list or not args.target:
        for name, t in TARGETS.items():
            print(f"{name:14s} {t.what}")
        return 0
    seconds = int(args.seconds if args.seconds is not None else args.minutes * 60)
    work = args.work / args.target
    corpus, seeds = work / "corpus", work / "seeds"
    corpus.mkdir(parents=True, exist_ok=True)
    n_seeds = write_seeds(args.target, seeds)
    dirs = [str(corpus), str(seeds)]
    if (REGRESSIONS / args.target).is_dir():
        dirs.append(str(REGRESSIONS / args.target))
    cmd = [sys.executable, "-m", "benchmarks.fuzzing.runner", args.target, *dirs,
           f"-max_total_time={seconds}", f"-timeout={args.timeout_s}", f"-rss_limit_mb={args.rss_limit_mb}",
           f"-artifact_prefix={work}/", "-print_final_stats=1", "-max_len=16384",
           # Native code gives libFuzzer no coverage (gcc cannot build -fsanitize=fuzzer), so seeds
           # that add no Python edge would be dropped: keep them, mutations start from real inputs.
           "-keep_seed=1"]
    if args.runs:
        cmd.append(f"-runs={args.runs}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=str(work), env=env, capture_output=True, text=True, errors="replace")
    log = proc.stdout + proc.stderr
    (work / "last.log").write_text(log)
    crashes = sorted(p.name for p in work.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-", "leak-")))
    figures = {"target": args.target, "seconds": seconds, "wall_s": round(time.monotonic() - started),
               "load_avg_1min": round(os.getloadavg()[0], 2), "seeds": n_seeds, **parse_figures(log),
               "exit_code": proc.returncode, "findings": crashes}
    print(json.dumps(figures))
    if proc.returncode != 0:
        print(log[-6000:], file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
