"""Schema fuzzing (R19): schemathesis against a real laneserve (SmolLM2, one lane, loopback),
driven by the server's own /openapi.json.

    python benchmarks/schemathesis_run.py                      # 100 examples per operation, seed 42
    python benchmarks/schemathesis_run.py --examples 200 --seed 7
    python benchmarks/schemathesis_run.py --url http://127.0.0.1:8000   # a server already running

Checks: no 5xx, status codes / content types / headers / bodies as documented, invalid data
(schemathesis' negative mode) rejected with 4xx, 405 with Allow on undeclared methods. Positive
and negative modes, phases examples + coverage + fuzzing, one worker. benchmarks/
schemathesis_hooks.py points bodies at the served model and keeps generations at 4 tokens.
Prints schemathesis' failures, then ONE summary line. tests/reliability/test_schema_fuzz.py runs
the same at a small count.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.server import StartedServer  # noqa: E402

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,negative_data_rejection,unsupported_method,missing_required_header")


def fuzz(url: str, examples: int, seed: int, workdir: str, timeout_s: float = 3600,
         phases: str = "examples,coverage,fuzzing") -> dict:
    """Run the schemathesis CLI; returns {"returncode", "output", "cases", "failures", "seconds"}."""
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "NO_COLOR": "1",
           "PYTHONPATH": os.path.join(REPO_ROOT, "benchmarks")}
    cmd = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "run", url + "/openapi.json",
           "--checks", CHECKS, "--mode", "all", "--max-examples", str(examples), "--seed", str(seed),
           "--workers", "1", "--phases", phases, "--no-color",
           "--generation-database", "none", "--request-timeout", "60", "--suppress-health-check", "all"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir, timeout=timeout_s)
    out = proc.stdout + proc.stderr
    cases = re.search(r"(\d+) generated, (?:(\d+) found (\d+) unique failures|(\d+) passed)", out)
    failures = int(cases.group(3)) if cases and cases.group(3) else 0
    return {"returncode": proc.returncode, "output": out, "cases": int(cases.group(1)) if cases else 0,
            "failures": failures, "seconds": time.monotonic() - t0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100, help="max examples per operation")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--url", help="fuzz this running server instead of starting one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneserve-fuzz-") as workdir:
        server = None
        url = args.url
        if url is None:
            server = StartedServer("smollm2", ["--threads", "1", "--ctx-size", "128"], cwd=workdir).start()
            url = server.base_url
        try:
            result = fuzz(url, args.examples, args.seed, workdir)
        finally:
            unhandled = 0
            if server is not None:
                unhandled = server.log_text().count("unhandled_exception")
                code = server.stop()
        if result["returncode"] != 0:
            print(result["output"][-20000:])
        print(f"schemathesis: {result['cases']} cases ({args.examples} max per operation, seed {args.seed}, "
              f"positive+negative), {result['failures']} failures, exit {result['returncode']}, "
              f"server unhandled exceptions {unhandled}, {result['seconds']:.0f} s"
              + (f", server exit {code}" if server is not None else ""))
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
