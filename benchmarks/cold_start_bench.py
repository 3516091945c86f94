"""Cold request TTFT of models served on demand: a streamed chat request for a model whose lanes
are not loaded, sent → first content byte, with a warm repack cache (--repack-cache-dir).

One laneserve over a --models-dir holding SmolLM2 and Gemma 3 (symlinks to the installed files),
--models-max 1, default threads. Warm-up: each model loaded once (fills the repack cache; not
measured). Then per round and model, alternating: "cold" — every model unloaded first (POST
/models/unload), so the request pays the lane load alone; "swap" — the other model loaded and
idle, so the request pays its unload and this model's load. Prints one summary line: p50 (min-max)
per model and case, and the 1.0 s target.

    python benchmarks/cold_start_bench.py [--rounds 5] [--repack-cache-dir DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gateway.cli.bench.launcher import start_laneserve  # noqa: E402
from gateway.cli.bench.metrics import percentile  # noqa: E402
from lanes.model_files import default_repack_cache_dir, gemma3_path, smollm2_path  # noqa: E402

MODELS = ("smollm2", "gemma3")
TARGET_S = 1.0
MESSAGES = [{"role": "user", "content": "Say hello."}]


def ttft_s(client: httpx.Client, model: str) -> float:
    """Streamed chat: request sent → first SSE event with content text."""
    body = {"model": model, "messages": MESSAGES, "max_tokens": 4, "stream": True, "temperature": 0}
    t0 = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"content":"' in line:
                first_s = time.perf_counter() - t0
                break
        else:
            raise RuntimeError(f"{model}: no content in the stream")
        for _ in lines:
            pass
    return first_s


def unload_all(client: httpx.Client) -> None:
    for model in MODELS:
        client.post("/models/unload", json={"model": model}).raise_for_status()


def load(client: httpx.Client, model: str) -> None:
    client.post("/models/load", json={"model": model}).raise_for_status()


def summary(values: list[float]) -> str:
    return f"{percentile(values, 50):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repack-cache-dir", default=str(default_repack_cache_dir()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cold_start_bench") as tmp:
        models_dir = Path(tmp) / "models"
        models_dir.mkdir()
        os.symlink(smollm2_path(), models_dir / "smollm2.gguf")
        os.symlink(gemma3_path(), models_dir / "gemma3.gguf")
        srv = start_laneserve("--models-dir", str(models_dir), "--models-max", "1", "--ctx-size", "2048",
                              "--repack-cache-dir", args.repack_cache_dir, "--log-level", "warning",
                              log_path=Path(tmp) / "server.log", cwd=tmp)
        try:
            srv.wait_ready()
            results: dict[tuple[str, str], list[float]] = {}
            with httpx.Client(base_url=srv.base_url, timeout=120.0) as client:
                for model in MODELS:  # warm-up: the repack cache holds both models from here on
                    ttft_s(client, model)
                for _ in range(args.rounds):
                    for model in MODELS:
                        unload_all(client)
                        results.setdefault((model, "cold"), []).append(ttft_s(client, model))
                        other = MODELS[1 - MODELS.index(model)]
                        load(client, other)
                        results.setdefault((model, "swap"), []).append(ttft_s(client, model))
                        results.setdefault((model, "warm"), []).append(ttft_s(client, model))
        finally:
            srv.terminate()
    parts = [f"{model} {case} {summary(results[(model, case)])}" for model in MODELS for case in ("cold", "swap", "warm")]
    worst_s = max(percentile(results[(m, c)], 50) for m in MODELS for c in ("cold", "swap"))
    print(f"cold-start TTFT p50 (min-max) over {args.rounds} rounds, warm repack cache, --models-max 1: "
          + "; ".join(parts) + f"; worst cold/swap p50 {worst_s:.2f} s vs target {TARGET_S:.1f} s "
          + ("(met)" if worst_s <= TARGET_S else "(missed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
