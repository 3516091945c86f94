"""The Sanic-only baseline of the frontend-overhead measurement (benchmarks/frontend_bench.py):
`POST /paced` streams `tokens` SSE events, one per tick of a clock shared by all streams (every
`interval_us`, absolute schedule, like a lane step emitting one token of every sequence), each
shaped like laneserve's completion chunk and carrying the synthetic lane's token text. No lane, no ring, no validation: what a bare Sanic stream costs on this box.

    python benchmarks/paced_server.py PORT
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

from sanic import Sanic
from sanic.response import json as json_response

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.cli.bench.synthetic import synthetic_token  # noqa: E402


def create_app() -> Sanic:
    app = Sanic("paced_baseline")
    app.config.ACCESS_LOG = False

    @app.get("/health")
    async def health(request):
        return json_response({"status": "ok"})

    ticker: dict = {}

    async def tick(interval_s: float) -> None:
        """One clock for every stream, as a lane's step emits one token of every sequence."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        k = 0
        while ticker["streams"]:
            k += 1
            delay = start + k * interval_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            done, ticker["step"] = ticker["step"], loop.create_future()
            done.set_result(None)
        ticker.clear()

    @app.post("/paced")
    async def paced(request):
        body = request.json
        tokens, interval_s = int(body["tokens"]), int(body["interval_us"]) / 1e6
        response = await request.respond(content_type="text/event-stream; charset=utf-8")
        if not ticker:
            ticker.update(streams=0, step=asyncio.get_running_loop().create_future())
            ticker["task"] = asyncio.ensure_future(tick(interval_s))
        ticker["streams"] += 1
        try:
            for i in range(tokens):
                await ticker["step"]
                chunk = {"id": "cmpl-paced", "object": "text_completion", "created": 0, "model": "paced",
                         "choices": [{"index": 0, "text": synthetic_token(i), "logprobs": None, "finish_reason": None}]}
                await response.send(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        finally:
            ticker["streams"] -= 1
        await response.send(b"data: [DONE]\n\n")
        await response.eof()

    return app


if __name__ == "__main__":
    create_app().run(host="127.0.0.1", port=int(sys.argv[1]), single_process=True, access_log=False,
                     motd=False)
