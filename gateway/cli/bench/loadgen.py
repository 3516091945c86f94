"""Load at one level of the sweep.

Closed loop (concurrency C): C workers each keep one request in flight; a worker sends its next
request when the previous one ends, error or not, until the level's requests have been sent.
Open loop (rate R): arrivals are a seeded Poisson process (exponential gaps, mean 1/R), each
request sent at its arrival time unless `max_concurrency` are in flight, then as soon as one
ends (its clock starts when it is sent, as in vLLM bench and AIPerf).
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Callable

from gateway.cli.bench.client import Conn, guarded_request
from gateway.cli.bench.config import ENDPOINTS, BenchConfig


@dataclass(frozen=True)
class Target:
    label: str
    base_url: str
    model: str


def request_body(config: BenchConfig, model: str, prompt: dict, max_tokens: int) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt["text"]}]
    else:
        body["prompt"] = prompt["ids"] if config.prompt_format == "ids" else prompt["text"]
    return body


class LevelRun:
    def __init__(self, config: BenchConfig, target: Target, on_done: Callable[[dict], None] | None = None,
                 api_key: str | None = None) -> None:
        self.config = config
        self.target = target
        self.headers = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.path = ENDPOINTS[config.endpoint]
        self.on_done = on_done or (lambda record: None)
        self.idle: list[Conn] = []

    async def one(self, prompt: dict, max_tokens: int, t_start: float) -> dict:
        conn = self.idle.pop() if self.idle else Conn(self.target.base_url)
        sent_s = time.perf_counter() - t_start
        body = request_body(self.config, self.target.model, prompt, max_tokens)
        record = await guarded_request(conn, self.path, body, self.config.timeout_s, self.headers)
        self.idle.append(conn)
        record["sent_s"] = sent_s
        return record

    async def warmup(self, prompts: list[dict]) -> list[dict]:
        """Uncounted requests (8 output tokens each), as many at a time as the sweep's widest level."""
        widest = self.config.max_concurrency if self.config.open_loop else max(self.config.concurrency)
        width = max(1, min(len(prompts), widest))
        t0 = time.perf_counter()
        records = []
        for i in range(0, len(prompts), width):
            records += await asyncio.gather(*(self.one(p, 8, t0) for p in prompts[i:i + width]))
        return records

    async def closed(self, concurrency: int, prompts: list[dict]) -> tuple[list[dict], float]:
        records: list[dict] = []
        next_index = 0
        t0 = time.perf_counter()

        async def worker() -> None:
            nonlocal next_index
            while next_index < len(prompts):
                index = next_index
                next_index += 1
                record = await self.one(prompts[index], self.config.output_tokens, t0)
                record["index"] = index
                records.append(record)
                self.on_done(record)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return records, time.perf_counter() - t0

    async def open(self, rate: float, prompts: list[dict], seed: int) -> tuple[list[dict], float]:
        rng = random.Random(seed)
        cap = asyncio.Semaphore(self.config.max_concurrency)
        records: list[dict] = []
        t0 = time.perf_counter()

        async def send(index: int) -> None:
            async with cap:
                record = await self.one(prompts[index], self.config.output_tokens, t0)
            record["index"] = index
            records.append(record)
            self.on_done(record)

        tasks = []
        arrival_s = 0.0
        for index in range(len(prompts)):
            delay_s = arrival_s - (time.perf_counter() - t0)
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            tasks.append(asyncio.ensure_future(send(index)))
            arrival_s += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        return records, time.perf_counter() - t0

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()
