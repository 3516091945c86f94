"""Properties of the wire for every route, generated from the route table (the OpenAPI document
plus the routes it leaves out on purpose), so a new route is covered without touching this file.

On raw sockets: a response starts with its status line, its headers come before any body byte,
a chunked body is well-formed to its terminating chunk with nothing after it, SSE frames are
whole events (`data:` with JSON, or an `event:` line naming the data's type, or comments), NDJSON
lines and JSON bodies parse, and a stream always ends with its protocol's terminal — normally, and
under `POST /stop`, a lane SIGKILL, queue timeouts and client disconnects at random points (after
which the server is still well: no slot held, the next request served).
"""
from __future__ import annotations

import asyncio
import os
import random
import signal

import orjson
import pytest

from gateway.server import openapi
from ..raw_http import RawResponse, exchange, ndjson_lines, request_bytes, sse_frames

USER = [{"role": "user", "content": "Say something."}]
# Bodies that make each JSON route do its real work; a route not listed gets {"model": "fake"} (its
# answer, an error or not, must still be well-formed on the wire).
EXAMPLES = {
    "/v1/completions": {"prompt": "Once upon", "max_tokens": 8},
    "/v1/chat/completions": {"messages": USER, "max_tokens": 8},
    "/v1/responses": {"input": "Say something.", "max_output_tokens": 8},
    "/v1/messages": {"messages": USER, "max_tokens": 8},
    "/v1/messages/count_tokens": {"messages": USER},
    "/v1/embeddings": {"input": "hello"},
    "/api/chat": {"messages": USER, "stream": False, "options": {"num_predict": 8}},
    "/api/generate": {"prompt": "Once upon", "stream": False, "options": {"num_predict": 8}},
    "/api/embed": {"input": "hello"},
    "/api/embeddings": {"prompt": "hello"},
    "/api/show": {"model": "fake"},
    "/tokenize": {"content": "hello"},
    "/detokenize": {"tokens": [1, 2]},
    "/stop": {},
}
STREAM_LONG = {"max_tokens": 400, "max_output_tokens": 400, "options": {"num_predict": 400}}
STREAM_TYPES = ("text/event-stream", "application/x-ndjson")


def _routes() -> list[tuple[str, str, dict]]:
    """(method, concrete path, operation) of every route; path parameters get a value."""
    doc = openapi.document()
    ops = [(method, path, op) for path, methods in doc["paths"].items() for method, op in methods.items()]
    ops += [(method, path, {}) for method, path in openapi.UNDOCUMENTED]
    fill = {"{model_id}": "fake", "{request_id}": "none", "{response_id}": "resp_none", "{asset}": "app.js",
            "{id_slot}": "0"}
    out = []
    for method, path, op in sorted(ops, key=lambda t: (t[1], t[0])):
        for name, value in fill.items():
            path = path.replace(name, value)
        assert "{" not in path, f"a path parameter this test cannot fill: {path}"
        out.append((method, path, op))
    return out


ROUTES = _routes()
STREAMING = [(m, p) for m, p, op in ROUTES if any(t in op.get("responses", {}).get("200", {}).get("content", {})
                                                  for t in STREAM_TYPES) and not p.startswith("/v1/audio")]


def _request(method: str, path: str, body: dict | None = None, **headers) -> bytes:
    if method in ("get", "head", "delete"):
        return request_bytes(method.upper(), path, b"", headers)
    payload = {"model": "fake", **(EXAMPLES.get(path, {}) if body is None else body)}
    return request_bytes(method.upper(), path, orjson.dumps(payload), {"Content-Type": "application/json", **headers})


def _stream_body(path: str, long: bool = False) -> dict:
    body = {**EXAMPLES[path], "stream": True}
    if long:
        body.update({k: v for k, v in STREAM_LONG.items() if k in body})
    return body


def _sse_terminal(path: str, frames: list) -> None:
    last = frames[-1][1]
    if path.startswith("/v1/messages"):
        assert last["type"] in ("message_stop", "error"), last
    elif path.startswith("/v1/responses"):
        assert last["type"] in ("response.completed", "response.incomplete", "response.failed"), last
        numbers = [data["sequence_number"] for _, data in frames]
        assert numbers == list(range(len(numbers)))
    else:
        assert last == "[DONE]" and all(data != "[DONE]" for _, data in frames[:-1]), frames[-3:]


def check_wire(path: str, r: RawResponse) -> None:
    """The properties of one whole response (exchange already checked the status line and framing)."""
    kind = r.headers.get("content-type", "").split(";")[0]
    if kind == "text/event-stream":
        _sse_terminal(path, sse_frames(r.body))
    elif kind == "application/x-ndjson":
        last = ndjson_lines(r.body)[-1]
        assert last.get("done") is True or set(last) == {"error"}, last
    elif kind == "application/json":
        orjson.loads(r.body)
    if r.status >= 400 and kind == "application/json":
        assert "error" in orjson.loads(r.body), r.body[:200]


def run(port: int, requests: list[bytes], timeout_s: float = 60.0) -> list[RawResponse]:
    async def go():
        return await asyncio.gather(*(exchange(port, raw, timeout_s) for raw in requests))
    return asyncio.run(go())


@pytest.fixture(scope="module")
def wire_server(tmp_path_factory):
    """A synthetic lane (2 ms steps), two slots, a short queue timeout: streams run, queue and time out."""
    from ..conftest import running_server

    with running_server(tmp_path_factory.mktemp("wire"), "--model",
                        "fake=synthetic:step_us=2000,prefill_us_per_token=0,n_ctx=1024", "--ctx-size", "1024",
                        "--parallel", "2", "--max-queue", "64", "--queue-timeout-s", "0.5",
                        "--keepalive-interval-s", "0.05",
                        real_model=False) as srv:
        yield srv


def test_the_route_table_is_covered():
    paths = {p for _, p, _ in ROUTES}
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat", "/ui"} <= paths
    assert set(EXAMPLES) <= paths, set(EXAMPLES) - paths  # no example for a route that is gone
    assert {p for _, p in STREAMING} >= {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages",
                                         "/api/chat", "/api/generate"}


@pytest.mark.parametrize("method, path", [(m, p) for m, p, _ in ROUTES], ids=lambda v: v)
def test_every_route_answers_well_formed(wire_server, method, path):
    for r in run(wire_server.port, [_request(method, path) for _ in range(4)]):
        check_wire(path, r)


@pytest.mark.parametrize("method, path", STREAMING, ids=lambda v: v)
def test_every_stream_ends_with_its_terminal(wire_server, method, path):
    """Eight at once on two slots: some queue (kept alive), all end with the protocol's terminal."""
    for r in run(wire_server.port, [_request(method, path, _stream_body(path)) for _ in range(8)]):
        assert r.status == 200, r.body[:200]
        check_wire(path, r)


def _under_fault(srv, path: str, fault) -> list[RawResponse]:
    async def go():
        streams = [asyncio.ensure_future(exchange(srv.port, _request("post", path, _stream_body(path, long=True))))
                   for _ in range(6)]
        await asyncio.sleep(0.3)  # two generating, four queued
        await fault()
        return await asyncio.gather(*streams)
    return asyncio.run(go())


def _settled(srv) -> None:
    """No slot held, nothing queued, and the next request is served."""
    async def go():
        for _ in range(200):
            ready = await exchange(srv.port, request_bytes("GET", "/health/ready"))
            model = orjson.loads(ready.body)["models"]["fake"]
            if ready.status == 200 and model["slots_in_use"] == 0 and model["queued"] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the server did not settle: {model}")
        r = await exchange(srv.port, _request("post", "/v1/completions"))
        assert r.status == 200, r.body[:200]
    asyncio.run(go())


@pytest.mark.parametrize("method, path", STREAMING, ids=lambda v: v)
def test_streams_stay_whole_under_stop_and_queue_timeouts(wire_server, method, path):
    async def stop():
        await exchange(wire_server.port, _request("post", "/stop", {}))
    for r in _under_fault(wire_server, path, stop):
        check_wire(path, r)
    _settled(wire_server)


@pytest.mark.parametrize("method, path", STREAMING, ids=lambda v: v)
def test_streams_stay_whole_when_the_lane_is_killed(wire_server, method, path):
    async def kill():
        ready = await exchange(wire_server.port, request_bytes("GET", "/health/ready"))
        os.kill(orjson.loads(ready.body)["models"]["fake"]["lanes"][0]["pid"], signal.SIGKILL)
    for r in _under_fault(wire_server, path, kill):
        check_wire(path, r)
    _settled(wire_server)


@pytest.mark.parametrize("method, path", STREAMING, ids=lambda v: v)
def test_disconnects_at_random_points_leave_the_server_well(wire_server, method, path):
    rng = random.Random(path)

    async def hang_up(after_bytes: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", wire_server.port)
        writer.write(_request("post", path, _stream_body(path, long=True)))
        await writer.drain()
        try:
            await asyncio.wait_for(reader.readexactly(after_bytes), 10)
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    async def go():
        await asyncio.gather(*(hang_up(rng.choice([1, 40, 200, 900, 3000, 12000])) for _ in range(12)))
    asyncio.run(go())
    _settled(wire_server)
