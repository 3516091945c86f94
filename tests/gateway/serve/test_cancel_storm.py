"""R9 (short form): a cancel storm on one lane — many concurrent streams, half of them abandoned at
random moments (queued, prefilling or decoding). Afterwards nothing is left in flight or queued,
every request that was not abandoned completed with its exact text, and the lane was never
restarted."""
from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

from gateway.cli.bench.synthetic import synthetic_text


async def test_cancel_storm_leaves_no_state_and_spares_the_others(own_server):
    srv = own_server("--model", "fake=synthetic:step_us=2000,prefill_us_per_token=200,n_ctx=1024",
                     "--ctx-size", "1024", "--parallel", "8", "--max-queue", "200", real_model=False)
    srv.wait_ready()
    rng = random.Random(9)
    plan = [(i, rng.random() < 0.5, rng.uniform(0.0, 0.3), rng.randrange(5, 60)) for i in range(120)]
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=60,
                                 limits=httpx.Limits(max_connections=200)) as client:
        before = (await client.get("/health/ready")).json()["models"]["fake"]["lanes"][0]

        async def one(i: int, abandon: bool, delay_s: float, max_tokens: int):
            body = {"model": "fake", "prompt": "x" * (1 + i % 40), "max_tokens": max_tokens, "stream": True}
            text = ""

            async def run():
                nonlocal text
                async with client.stream("POST", "/v1/completions", json=body) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            event = json.loads(line[6:])
                            assert "error" not in event, event
                            text += event["choices"][0]["text"] if event["choices"] else ""

            if abandon:
                try:
                    await asyncio.wait_for(run(), delay_s)
                except asyncio.TimeoutError:
                    return None
                return text
            await run()
            return text

        results = await asyncio.gather(*[one(*p) for p in plan])
        for (i, abandon, _, max_tokens), text in zip(plan, results):
            if not abandon:
                assert text == synthetic_text(max_tokens), i
        deadline = time.monotonic() + 2.0
        while True:
            model = (await client.get("/health/ready")).json()["models"]["fake"]
            if model["slots_in_use"] == 0 and model["queued"] == 0:
                break
            assert time.monotonic() < deadline, model
            await asyncio.sleep(0.02)
        after = model["lanes"][0]
        assert (after["pid"], after["restarts"]) == (before["pid"], before["restarts"])
        # the lane still serves, at full width
        again = await asyncio.gather(*[client.post("/v1/completions", json={"model": "fake", "prompt": "x",
                                                                             "max_tokens": 3}) for _ in range(8)])
        assert all(r.status_code == 200 for r in again)
    records = [json.loads(line) for line in srv.records_path.read_text().splitlines()]
    outcomes = {r["outcome"] for r in records}
    assert outcomes <= {"success", "disconnect"}, outcomes
