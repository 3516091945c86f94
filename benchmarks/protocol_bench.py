"""Gateway CPU per streamed token, protocol against protocol in the same run: OpenAI chat
completions, the Responses API and Anthropic Messages, each a plain streamed answer.

    python benchmarks/protocol_bench.py                # 8 rounds, 256 tokens per request

One laneserve on the lanes' synthetic backend (one step of `--step-us` per token for all slots,
no prefill time, `--parallel 16`, one thread), so lane compute is the same for every protocol.
Per round and protocol: the gateway process's CPU time (user + system; its lanes are children and
not counted) over `--c1-requests` streams one at a time, and over `--c16-waves` waves of 16 at
once, divided by the output tokens each protocol's own usage reports (chat's usage chunk,
`response.completed`/`response.incomplete`, Messages' `message_delta`). The protocols take turns
unit by unit, the first of each turn rotating, so drift on a shared machine falls on all alike;
each unit's first turn (connections opening) is not counted. Every stream must report exactly the
tokens it asked for, else the run stops. Prints per-round figures to stderr and ONE summary line:
medians per protocol and each protocol's ratio to chat completions, with the per-round range.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.client import Conn, body_parts  # noqa: E402
from gateway.cli.bench.launcher import start_laneserve  # noqa: E402
from gateway.cli.bench.proc import cpu_seconds  # noqa: E402

MODEL = "fake"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SETTLE_S = 0.01  # after a unit, before its CPU reading: the gateway's work after the last byte counts
TIMEOUT_S = 120.0


def _chat(tokens: int) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
                                    "max_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}


def _responses(tokens: int) -> tuple[str, dict]:
    return "/v1/responses", {"model": MODEL, "input": PROMPT, "max_output_tokens": tokens, "stream": True}


def _messages(tokens: int) -> tuple[str, dict]:
    return "/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
                            "max_tokens": tokens, "stream": True}


def _chat_tokens(event: dict) -> int | None:
    return (event.get("usage") or {}).get("completion_tokens")


def _responses_tokens(event: dict) -> int | None:
    if event.get("type") in ("response.completed", "response.incomplete"):
        return event["response"]["usage"]["output_tokens"]
    return None


def _messages_tokens(event: dict) -> int | None:
    return event["usage"]["output_tokens"] if event.get("type") == "message_delta" else None


PROTOCOLS = {"chat": (_chat, _chat_tokens), "responses": (_responses, _responses_tokens),
             "messages": (_messages, _messages_tokens)}


async def stream(conn: Conn, protocol: str, tokens: int) -> int:
    """One streamed request on a kept-alive connection; the output tokens its usage reports."""
    make, tokens_of = PROTOCOLS[protocol]
    path, body = make(tokens)
    payload = json.dumps(body).encode()
    await conn.open()
    conn.writer.write((f"POST {path} HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload)
    status = int((await conn.reader.readline()).split()[1])
    headers = {}
    while (line := await conn.reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    buf, reported = b"", None
    async for data in body_parts(conn.reader, headers):
        buf += data
        while (end := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:end], buf[end + 2:]
            for line in event.split(b"\n"):
                if line.startswith(b"data: {"):
                    found = tokens_of(json.loads(line[6:]))
                    reported = found if found is not None else reported
    if status != 200 or reported != tokens:
        raise SystemExit(f"{protocol}: status {status}, {reported} tokens reported, asked for {tokens}")
    return reported


def alternate(pid: int, url: str, concurrency: int, units: int, tokens: int, round_index: int) -> dict[str, float]:
    """Per protocol: gateway CPU µs per token over `units` counted units of `concurrency` streams."""
    names = list(PROTOCOLS)

    async def run() -> dict[str, float]:
        conns = {name: [Conn(url) for _ in range(concurrency)] for name in names}
        cpu_s = {name: 0.0 for name in names}
        counted = {name: 0 for name in names}
        try:
            for i in range(units + 1):
                shift = (i + round_index) % len(names)
                for name in names[shift:] + names[:shift]:
                    cpu0 = cpu_seconds(pid)
                    got = await asyncio.wait_for(asyncio.gather(*(stream(c, name, tokens) for c in conns[name])),
                                                 TIMEOUT_S)
                    await asyncio.sleep(SETTLE_S)
                    if i:
                        cpu_s[name] += cpu_seconds(pid) - cpu0
                        counted[name] += sum(got)
        finally:
            for conn_list in conns.values():
                for conn in conn_list:
                    conn.close()
        return {name: cpu_s[name] / counted[name] * 1e6 for name in names}

    return asyncio.run(run())


def _ratio(values: list[float], reference: list[float]) -> str:
    per_round = [v / r for v, r in zip(values, reference)]
    return (f"{statistics.median(values) / statistics.median(reference):.2f}x "
            f"[{min(per_round):.2f}-{max(per_round):.2f}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256, help="max tokens per request")
    ap.add_argument("--c1-requests", type=int, default=12, help="streams one at a time per round and protocol")
    ap.add_argument("--c16-waves", type=int, default=4, help="waves of 16 concurrent streams per round and protocol")
    ap.add_argument("--step-us", type=int, default=1000, help="synthetic lane: time per decode step")
    args = ap.parse_args()
    model = f"{MODEL}=synthetic:step_us={args.step_us},prefill_us_per_token=0,n_ctx=4096"
    server = start_laneserve("--model", model, "--threads", "1", "--parallel", "16", "--ctx-size", "4096",
                             "--log-level", "warning")
    cpu_us = {(c, name): [] for c in (1, 16) for name in PROTOCOLS}
    t_start = time.monotonic()
    try:
        server.wait_ready()
        alternate(server.pid, server.base_url, 16, 1, 32, 0)  # warm-up: imports, slot buffers
        for r in range(args.rounds):
            for concurrency, units in ((1, args.c1_requests), (16, args.c16_waves)):
                for name, value in alternate(server.pid, server.base_url, concurrency, units, args.tokens, r).items():
                    cpu_us[concurrency, name].append(value)
            print(f"round {r + 1}/{args.rounds} ({time.monotonic() - t_start:.0f} s, load {os.getloadavg()[0]:.1f}): "
                  + ", ".join(f"{name} c{c} {cpu_us[c, name][-1]:.1f} us" for c in (1, 16) for name in PROTOCOLS),
                  file=sys.stderr, flush=True)
    finally:
        server.terminate()
    parts = [f"protocol_bench | synthetic step {args.step_us} us, {args.tokens} tok/request, {args.rounds} rounds, "
             "gateway cpu/token medians"]
    for c in (1, 16):
        ref = cpu_us[c, "chat"]
        parts.append(f"c{c}: " + ", ".join(
            f"{name} {statistics.median(cpu_us[c, name]):.1f} us"
            + ("" if name == "chat" else f" ({_ratio(cpu_us[c, name], ref)} chat)") for name in PROTOCOLS))
    print(" | ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
