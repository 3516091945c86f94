"""Regenerates llama-server's greedy outputs with a LoRA adapter, the reference of
tests/gateway/lora/test_lora_llama_server.py (CI cannot build llama-server; this script can run
wherever one is built):

    python tests/data/lora/make_server_reference.py --llama-server /path/to/llama-server [--model smollm2]

For each case of CASES it writes the adapter with tests/csrc/model/lora_gguf.py (deterministic from its
spec and seed), starts `llama-server -m BASE --lora ADAPTER` on a loopback port (1 slot, 2 threads, no
prompt cache reuse) and asks /completion for each PROMPTS entry as a raw prompt (no chat template on
either side), greedy (`temperature: 0`), up to MAX_TOKENS tokens, with the adapter at its scale and,
for comparison, at scale 0 (the base model). Per generated token it keeps the id, its bytes and the
top-2 log-probabilities before sampling (`n_probs: 2`): their difference is the top-1/top-2 logit
margin, which the test uses to stop comparing at the first near-tie (golden.GATES' rule). The prompt's
token ids (/tokenize, with BOS as the server adds it) are stored so the test can check that laneserve
tokenizes the prompt identically. Output: server-<case>.json next to this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "csrc" / "model"))
from lora_gguf import REAL_CASES, write_adapter  # noqa: E402

# The adapters of the llama.cpp reference data (lora_gguf.REAL_CASES), all matrices of every layer.
CASES = {"smollm2": "smollm2-r16-f16-all", "gemma3": "gemma3-r8-f32-all"}
MAX_TOKENS = 32
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "Ingredients for simple pancakes:\n1.",
    "Q: Why is the sky blue?\nA:",
    "Translate to French: \"Good morning, how are you?\"\n",
]
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(base_url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with _LOOPBACK.open(req, timeout=300) as resp:
        return json.loads(resp.read())


def greedy(base_url: str, prompt: str, scale: float) -> dict:
    out = post(base_url, "/completion", {
        "prompt": prompt, "n_predict": MAX_TOKENS, "temperature": 0, "n_probs": 2, "post_sampling_probs": False,
        "cache_prompt": False, "lora": [{"id": 0, "scale": scale}]})
    steps = out["completion_probabilities"]
    margins = [round(s["top_logprobs"][0]["logprob"] - s["top_logprobs"][1]["logprob"], 5) for s in steps]
    assert all(s["top_logprobs"][0]["id"] == s["id"] for s in steps), "greedy pick is not the top-1"
    return {"ids": [s["id"] for s in steps], "bytes": [s["bytes"] for s in steps], "margins": margins,
            "text": out["content"], "stop_eos": bool(out.get("stop_type") == "eos")}


def run_case(llama_server: str, model: str, threads: int) -> dict:
    import lanes
    from gateway.cli.bench.launcher import free_port, start

    case = CASES[model]
    _, spec, scale = REAL_CASES[case]
    base = Path(lanes.smollm2_path() if model == "smollm2" else lanes.gemma3_path())
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / f"{case}.gguf"
        write_adapter(adapter, base, spec)
        port = free_port()
        srv = start([llama_server, "-m", str(base), "--lora", str(adapter), "--parallel", "1", "-t", str(threads),
                     "-c", "2048", "--host", "127.0.0.1", "--port", str(port), "--no-warmup"], port,
                    name="llama-server", log_path=Path(tmp) / "llama-server.log")
        try:
            srv.wait_ready(path="/health", timeout_s=300)
            records = []
            for prompt in PROMPTS:
                ids = post(srv.base_url, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
                records.append({"prompt": prompt, "prompt_ids": ids, "adapter": greedy(srv.base_url, prompt, scale),
                                "base": greedy(srv.base_url, prompt, 0.0)})
        finally:
            srv.terminate()
    return {"case": case, "model": model, "scale": scale, "max_tokens": MAX_TOKENS,
            "server": "llama-server of llama-cpp-python 0.3.36's llama.cpp", "records": records}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", default="/work/llama-build/build/bin/llama-server")
    ap.add_argument("--model", action="append", choices=sorted(CASES), help="default: both")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for model in args.model or sorted(CASES):
        ref = run_case(args.llama_server, model, args.threads)
        out = HERE / f"server-{ref['case']}.json"
        out.write_text(json.dumps(ref, indent=1) + "\n", encoding="utf-8")
        changed = sum(r["adapter"]["ids"] != r["base"]["ids"] for r in ref["records"])
        print(f"{ref['case']}: {len(ref['records'])} prompts, adapter changes {changed} of them -> {out.name}")


if __name__ == "__main__":
    main()
