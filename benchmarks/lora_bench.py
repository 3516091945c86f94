"""LoRA benchmark: decode speed with adapters vs the base model, adapter load time and memory.

    python benchmarks/lora_bench.py [--model smollm2|gemma3] [--rounds 3] [--threads 2]

In-process BatchEngine (what a lane runs), greedy, ignore_eos, 64 tokens per sequence after a short
distinct prompt. Per round, base and adapter runs alternate (the VM is noisy: ratios come from
side-by-side runs, medians over rounds):
  c1  one sequence, base vs a rank-16 all-matrix adapter (F16 halves)     target ≥ 0.85×
  c8  eight sequences, base vs four different rank-16 adapters, two sequences each   target ≥ 0.80×
Decode tok/s = generated tokens / time of the steps after every sequence's first token.
Adapter load: time of BatchEngine.load_adapter (map + check), its tensor bytes, and the lane's
RSS growth after its first use.

With --llama-server PATH (default: the local build, when present; "" skips it), the same load against
llama-server beside ours: `--parallel 8 -t THREADS --lora A --lora B --lora C --lora D`, the same prompts
and 64 tokens (ignore_eos), each request's adapters as `"lora": [{"id", "scale"}]` (base: every scale
0; it batches only requests with equal adapter settings together). Its decode tok/s: a request's own
timings.predicted_per_second at c1, their sum over the eight concurrent requests at c8 (all eight
decode side by side for the whole run). Ends with ONE summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests" / "csrc" / "model"))

import lanes  # noqa: E402
from lanes import _runtime  # noqa: E402
from lora_gguf import AdapterSpec, Q, cached_adapter  # noqa: E402

TOKENS = 64
LLAMA_SERVER = "/work/llama-build/build/bin/llama-server"
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def decode_rate(engine, tok, n_seq: int, adapters_of) -> float:
    """Generated tokens per second over the steps where every sequence decodes."""
    for i in range(n_seq):
        ids = tok.encode(prompt(i), True, False)
        engine.add(i + 1, 0, ids, TOKENS, temperature=0.0, ignore_eos=True, adapters=adapters_of(i))
    first = set()
    t0 = None
    tokens = 0
    while engine.has_work():
        events = engine.step()
        if t0 is None and len(first) == n_seq:
            t0 = time.perf_counter()
        for rid, *_ in events:
            if rid in first and t0 is not None:
                tokens += 1
            first.add(rid)
    return tokens / (time.perf_counter() - t0)


def prompt(i: int) -> str:
    return f"Item {i}: a short note about the number {i * 7 + 3}."


class LlamaServer:
    """llama-server with the four adapters loaded (ids 0..3 in file order), on a loopback port."""

    def __init__(self, binary: str, model: Path, adapters: list[Path], threads: int):
        from gateway.cli.bench.launcher import free_port, start

        port = free_port()
        cmd = [binary, "-m", str(model), "--parallel", "8", "-t", str(threads), "-c", str(8 * 512),
               "--host", "127.0.0.1", "--port", str(port), "--no-warmup"]
        for a in adapters:
            cmd += ["--lora", str(a)]
        self.n_adapters = len(adapters)
        self.srv = start(cmd, port, name="llama-server")
        self.srv.wait_ready(path="/health", timeout_s=300)

    def decode_rate(self, i: int, adapter: int | None) -> float:
        """One greedy request (prompt i, TOKENS tokens); adapter None: base (every scale 0)."""
        lora = [{"id": k, "scale": 1.0 if k == adapter else 0.0} for k in range(self.n_adapters)]
        body = {"prompt": prompt(i), "n_predict": TOKENS, "ignore_eos": True, "temperature": 0,
                "cache_prompt": False, "lora": lora}
        req = urllib.request.Request(self.srv.base_url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with _LOOPBACK.open(req, timeout=600) as resp:
            out = json.loads(resp.read())
        assert out["timings"]["predicted_n"] == TOKENS, out["timings"]
        return float(out["timings"]["predicted_per_second"])

    def aggregate_rate(self, n_seq: int, adapter_of) -> float:
        with ThreadPoolExecutor(n_seq) as ex:
            return sum(ex.map(lambda i: self.decode_rate(i, adapter_of(i)), range(n_seq)))

    def close(self) -> None:
        self.srv.terminate()


def llama_server_rounds(server: LlamaServer, rounds: int) -> dict[str, list[float]]:
    """The same alternating rounds as ours: c1 base vs adapter 0, c8 base vs four adapters."""
    rates = {k: [] for k in ("c1 base", "c1 lora", "c8 base", "c8 lora")}
    server.aggregate_rate(1, lambda i: 0)  # warm-up
    for r in range(rounds):
        for level, n, lora in (("c1", 1, lambda i: 0), ("c8", 8, lambda i: i % 4)):
            for kind in (("base", "lora") if r % 2 == 0 else ("lora", "base")):
                rates[f"{level} {kind}"].append(server.aggregate_rate(n, (lambda i: None) if kind == "base" else lora))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "gemma3"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=LLAMA_SERVER if os.path.exists(LLAMA_SERVER) else "",
                    help="llama-server binary to measure beside ours (\"\": skip)")
    args = ap.parse_args()
    path = Path(lanes.smollm2_path() if args.model == "smollm2" else lanes.gemma3_path())
    files = [cached_adapter(path, AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=60 + k)) for k in range(4)]
    tok = _runtime.Tokenizer(str(path))
    engine = _runtime.BatchEngine(str(path), threads=args.threads, ctx_size=512, num_slots=8, max_batch_tokens=256)
    rss0 = rss_bytes()
    t = time.perf_counter()
    tensor_bytes = engine.load_adapter(1, str(files[0]))
    load_ms = (time.perf_counter() - t) * 1e3
    for k in range(1, 4):
        engine.load_adapter(k + 1, str(files[k]))
    decode_rate(engine, tok, 1, lambda i: [(1, 1.0)])  # warm-up; touches adapter 1's pages
    rss1_mib = (rss_bytes() - rss0) / 2**20

    ratios = {"c1": [], "c8": []}
    rates = {k: [] for k in ("c1 base", "c1 lora", "c8 base", "c8 lora")}
    for r in range(args.rounds):
        for level, n, lora in (("c1", 1, lambda i: [(1, 1.0)]), ("c8", 8, lambda i: [(1 + i % 4, 1.0)])):
            order = ("base", "lora") if r % 2 == 0 else ("lora", "base")
            got = {}
            for kind in order:
                got[kind] = decode_rate(engine, tok, n, (lambda i: []) if kind == "base" else lora)
                rates[f"{level} {kind}"].append(got[kind])
            ratios[level].append(got["lora"] / got["base"])
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"model {args.model}, threads {args.threads}, {args.rounds} rounds, {TOKENS} tokens per sequence")
    for k in rates:
        print(f"  {k:8s} decode tok/s median {med[k]:7.1f}  rounds {', '.join(f'{x:.1f}' for x in rates[k])}")
    print(f"  adapter: rank 16 all matrices F16, file {files[0].stat().st_size / 2**20:.2f} MiB, tensors "
          f"{tensor_bytes / 2**20:.2f} MiB, load {load_ms:.1f} ms, RSS +{rss1_mib:.1f} MiB after 4 loads and first use")
    c1, c8 = statistics.median(ratios["c1"]), statistics.median(ratios["c8"])
    beside = ""
    if args.llama_server:
        server = LlamaServer(args.llama_server, path, files, args.threads)
        try:
            ll = llama_server_rounds(server, args.rounds)
        finally:
            server.close()
        ll_med = {k: statistics.median(v) for k, v in ll.items()}
        ll_ratio = {lv: statistics.median(a / b for a, b in zip(ll[f"{lv} lora"], ll[f"{lv} base"]))
                    for lv in ("c1", "c8")}
        print(f"llama-server {args.llama_server} (--parallel 8 -t {args.threads}, the same requests):")
        for k in ll:
            print(f"  {k:8s} decode tok/s median {ll_med[k]:7.1f}  rounds {', '.join(f'{x:.1f}' for x in ll[k])}")
        beside = (f"; llama-server c1 {ll_ratio['c1']:.2f}x c8 {ll_ratio['c8']:.2f}x; lora tok/s ours/llama-server "
                  f"c1 {med['c1 lora']:.0f}/{ll_med['c1 lora']:.0f} c8 {med['c8 lora']:.0f}/{ll_med['c8 lora']:.0f}")
    print(f"SUMMARY lora/base decode c1 {c1:.2f}x (target 0.85) c8 4 adapters {c8:.2f}x (target 0.80); "
          f"load {load_ms:.0f} ms; file {files[0].stat().st_size / 2**20:.2f} MiB{beside}")


if __name__ == "__main__":
    main()
