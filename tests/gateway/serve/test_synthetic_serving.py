"""The whole serving path on the lanes' synthetic backend (no weights): exact text through the
rings and framings (JSON-hostile characters every 7th step), keep-alives while a long prefill
runs, many requests batched on one lane, disconnect and lane death — deterministic and fast.
(Queueing and 429s: test_admission.py.)"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import openai
import pytest

from gateway.cli.bench.synthetic import synthetic_text


@pytest.fixture
def client(synthetic_server):
    with httpx.Client(base_url=synthetic_server.base_url, timeout=60) as c:
        yield c


@pytest.fixture
def oai(synthetic_server):
    c = openai.OpenAI(base_url=synthetic_server.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    yield c
    c.close()


def lanes(client) -> list[dict]:
    return client.get("/health/ready").json()["models"]["fake"]["lanes"]


def wait_idle(client, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(lane["state"] != "ready" for lane in lanes(client)):
        assert time.monotonic() < deadline, lanes(client)
        time.sleep(0.02)


def test_exact_text_stream_and_non_stream(oai):
    expected = synthetic_text(20)
    reply = oai.completions.create(model="fake", prompt="Hello", max_tokens=20)
    assert reply.choices[0].text == expected and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 20 and reply.usage.prompt_tokens == 1
    chunks = list(oai.chat.completions.create(model="fake", messages=[{"role": "user", "content": "Hi"}],
                                              max_tokens=20, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "length"
    message = oai.chat.completions.create(model="fake", messages=[{"role": "user", "content": "Hi"}], max_tokens=20)
    assert message.choices[0].message.content == expected


def test_n_and_prompt_arrays_number_choices(oai):
    reply = oai.completions.create(model="fake", prompt=["a", "b c"], n=2, max_tokens=8)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert all(c.text == synthetic_text(8) for c in reply.choices)
    assert reply.usage.completion_tokens == 32
    chunks = list(oai.completions.create(model="fake", prompt=["a", "b"], n=2, max_tokens=3, stream=True))
    for index in range(4):
        mine = [c.choices[0] for c in chunks if c.choices[0].index == index]
        assert "".join(c.text for c in mine) == synthetic_text(3) and mine[-1].finish_reason == "length"


def test_keepalive_comments_while_prefill_runs(client, sse):
    # 600 prompt tokens × 1 ms each ≈ 0.6 s before the first token; keep-alive every 0.2 s.
    response = client.post("/v1/completions", json={"model": "fake", "prompt": [216] * 600, "max_tokens": 2,
                                                     "stream": True})
    events = sse(response)
    first_data = next(i for i, e in enumerate(events) if isinstance(e, dict))
    assert events[:first_data].count(":") >= 1
    assert events[-1] == "[DONE]"


def slots_in_use(client) -> int:
    return sum(lane["slots_in_use"] for lane in lanes(client))


def wait_slots_free(client, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while slots_in_use(client):
        assert time.monotonic() < deadline, f"slots still taken after {timeout_s} s: {lanes(client)}"
        time.sleep(0.01)


def test_concurrent_requests_share_one_lane_and_each_get_exactly_their_own_text(client, synthetic_server):
    """Several streams and non-stream requests batched on the one replica at once: the lane's
    records interleave in one ring, and each response carries exactly its own tokens."""
    sizes = [40, 25, 60, 33, 47, 12]
    results: dict[int, object] = {}

    def run(k: int, n: int) -> None:
        with httpx.Client(base_url=synthetic_server.base_url, timeout=60) as c:
            if k % 2:
                reply = c.post("/v1/completions", json={"model": "fake", "prompt": "x " * (k + 1), "max_tokens": n})
                results[k] = (reply.status_code, reply.json()["choices"][0]["text"],
                              reply.json()["usage"]["completion_tokens"])
            else:
                with c.stream("POST", "/v1/completions", json={"model": "fake", "prompt": "x " * (k + 1),
                                                                "max_tokens": n, "stream": True}) as r:
                    text = "".join(json.loads(line[len("data: "):])["choices"][0]["text"]
                                   for line in r.iter_lines() if line.startswith("data: {"))
                    results[k] = (r.status_code, text, n)

    threads = [threading.Thread(target=run, args=(k, n), daemon=True) for k, n in enumerate(sizes)]
    for t in threads:
        t.start()
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, slots_in_use(client))
        time.sleep(0.005)
    for t in threads:
        t.join(30)
    assert {k: results.get(k) for k in range(len(sizes))} == {
        k: (200, synthetic_text(n), n) for k, n in enumerate(sizes)}
    assert len(lanes(client)) == 1 and peak >= 2  # really batched on one lane, not one after another
    wait_slots_free(client, 2.0)


def test_disconnect_frees_the_slot_within_1s_without_respawn(client):
    before = lanes(client)
    with client.stream("POST", "/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1000,
                                                         "stream": True}) as response:
        for n, line in enumerate(response.iter_lines()):
            if n > 10:
                # checked while the stream is open: leaving the loop closes the connection (httpx
                # finalises the line iterator at once), and the slot may be free before the next call
                assert slots_in_use(client) == 1
                break
    wait_slots_free(client, 1.0)
    assert client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1}).status_code == 200
    assert [(l["pid"], l["restarts"]) for l in lanes(client)] == [(l["pid"], l["restarts"]) for l in before]


def test_lane_killed_mid_stream_gives_error_event_and_respawns(client, synthetic_server):
    pid = lanes(client)[0]["pid"]
    lines = []
    killed_at = None
    with client.stream("POST", "/v1/chat/completions", json={"model": "fake", "stream": True, "max_tokens": 1000,
                                                              "messages": [{"role": "user", "content": "x"}]}) as r:
        for line in r.iter_lines():
            if not line:
                continue
            lines.append(line)
            if killed_at is None and line.startswith("data: {"):
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
    assert time.monotonic() - killed_at < 1.0
    assert lines[-1] == "data: [DONE]" and '"error"' in lines[-2]
    # while the lane restarts: 503 + Retry-After (or 200 once it is back), never a hang
    deadline = time.monotonic() + 30
    while True:
        reply = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1}, timeout=5)
        if reply.status_code == 200:
            break
        assert reply.status_code in (503, 429) and "retry-after" in reply.headers
        assert time.monotonic() < deadline
        time.sleep(0.05)
    after = lanes(client)[0]
    assert after["pid"] != pid and after["restarts"] >= 1
    assert 'laneserve_lane_restarts_total{model="fake"}' in client.get("/metrics").text


def test_stalled_reader_is_cut_off_and_frees_the_lane(own_server):
    import socket

    srv = own_server("--model", "fake=synthetic:step_us=0,n_ctx=1000000", "--ctx-size", "1000000",
                     "--write-stall-timeout-s", "1", real_model=False)
    srv.wait_ready()
    body = b'{"model":"fake","prompt":"x","max_tokens":900000,"stream":true}'
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-ID: stalled\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    try:
        with httpx.Client(base_url=srv.base_url, timeout=10) as client:
            deadline = time.monotonic() + 20
            while client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1}
                              ).status_code != 200:
                assert time.monotonic() < deadline, "a client that stopped reading kept the lane"
                time.sleep(0.1)
            # Whichever limit trips first ends it: our write-stall timeout, or the pool's cap on
            # undelivered output per request (the lane may be free before the handler is done).
            mine = srv.records("stalled", timeout_s=max(0.0, deadline - time.monotonic()))
            assert mine, "the stalled request was never finished"
            assert (mine[0]["outcome"], mine[0]["error_code"]) in (("timeout", "write_stalled"),
                                                                   ("error", "output_overflow"))
    finally:
        sock.close()
    assert srv.terminate() == 0


def _read_http_stream(sock) -> tuple[bytes, bytes]:
    """(head, de-chunked body) of one chunked HTTP/1.1 response read to its last chunk."""
    def more() -> bytes:
        data = sock.recv(65536)
        assert data, "the server closed the stream before its last chunk"
        return data

    data = b""
    while b"\r\n\r\n" not in data:
        data += more()
    head, rest = data.split(b"\r\n\r\n", 1)
    body = []
    while True:
        while b"\r\n" not in rest:
            rest += more()
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += more()
        if size == 0:
            return head, b"".join(body)
        body.append(rest[:size])
        rest = rest[size + 2:]


def test_reader_that_pauses_gets_every_byte_in_order(own_server):
    """The client stops reading while tokens pour out: the socket fills, the native relay hands
    the untaken tail to the transport and later deltas queue behind it; then the client reads
    everything, in order, with intact chunk framing."""
    import socket

    srv = own_server("--model", "fake=synthetic:step_us=20,n_ctx=1000000", "--ctx-size", "1000000", real_model=False)
    srv.wait_ready()
    n = 90000  # ~22 MB of events: far more than the kernel buffers (4 MB send, 64 kB receive)
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "x"}], "max_tokens": n,
                       "stream": True}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # before connect: sets the window
    sock.settimeout(60)
    sock.connect(("127.0.0.1", srv.port))
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        # Stay paused until the server has met a full socket (counted live), however slow the
        # machine is; well inside the 30 s write-stall timeout that would cut this reader off.
        deadline = time.monotonic() + 20
        with httpx.Client(base_url=srv.base_url, timeout=10) as client:
            while _socket_full_writes(client) < 1:
                assert time.monotonic() < deadline, "the socket never filled while the reader paused"
                time.sleep(0.2)
        time.sleep(0.5)  # and let later deltas queue behind the handed-over tail
        head, stream = _read_http_stream(sock)
    finally:
        sock.close()
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    events = stream.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    chunks = [json.loads(e[len(b"data: "):]) for e in events[:-2] if not e.startswith(b":")]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == synthetic_text(n)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert srv.terminate() == 0


def _socket_full_writes(client) -> float:
    prefix = 'laneserve_socket_full_writes_total{model="fake"}'
    lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_cors_only_for_configured_origins(own_server):
    srv = own_server("--model", "fake=synthetic:step_us=100,n_ctx=512", "--cors-origins", "http://localhost:3000",
                     real_model=False)
    srv.wait_ready()
    allowed = {"Origin": "http://localhost:3000"}
    with httpx.Client(base_url=srv.base_url, timeout=10) as client:
        preflight = client.options("/v1/chat/completions", headers={
            **allowed, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        body = {"model": "fake", "prompt": "x", "max_tokens": 2}
        plain = client.post("/v1/completions", json=body, headers=allowed)
        assert plain.headers["access-control-allow-origin"] == "http://localhost:3000"
        streamed = client.post("/v1/completions", json={**body, "stream": True}, headers=allowed)
        assert streamed.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = client.post("/v1/completions", json=body, headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    assert srv.terminate() == 0
