"""Malformed and hostile inputs over real sockets → 4xx envelopes, while the server keeps serving."""
from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2

VALID = {"model": "smollm2", "prompt": "Hi", "max_tokens": 2}

HOSTILE_BODIES = {
    "truncated": b'{"model": "smollm2", "prompt": "x"',
    "array root": b"[]",
    "stream as string": b'{"model":"smollm2","prompt":"x","stream":"true"}',
    "nan": b'{"model":"smollm2","prompt":"x","temperature":NaN}',
    "infinity": b'{"model":"smollm2","prompt":"x","temperature":Infinity}',
    "1e999": b'{"model":"smollm2","prompt":"x","temperature":1e999}',
    "lone surrogate": b'{"model":"smollm2","prompt":"\\ud800"}',
    "invalid utf-8": b'{"model":"smollm2","prompt":"\xff\xfe"}',
    "bom": b'\xef\xbb\xbf{"model":"smollm2","prompt":"x"}',
    "deep nesting": b'{"model":"smollm2","prompt":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "empty": b"",
    "gbk": '{"model":"smollm2","prompt":"你好"}'.encode("gbk"),
    "max_tokens bool": b'{"model":"smollm2","prompt":"x","max_tokens":true}',
    "max_tokens huge": b'{"model":"smollm2","prompt":"x","max_tokens":123456789012345678901234567890}',
    "negative max_tokens": b'{"model":"smollm2","prompt":"x","max_tokens":-5}',
    "n too large": b'{"model":"smollm2","prompt":"x","n":1000}',
    "top_p out of range": b'{"model":"smollm2","prompt":"x","top_p":7}',
    "10k stop strings": b'{"model":"smollm2","prompt":"x","stop":[' + b",".join([b'"a"'] * 10_000) + b"]}",
    "huge logit_bias": b'{"model":"smollm2","prompt":"x","logit_bias":{' + b",".join(
        b'"%d":1' % i for i in range(5000)) + b"}}",
    "logit_bias beyond vocab": b'{"model":"smollm2","prompt":"x","logit_bias":{"999999":1}}',
    "token id beyond vocab": b'{"model":"smollm2","prompt":[99999999]}',
    "path traversal model": b'{"model":"../../etc/passwd","prompt":"x"}',
    "empty messages": b'{"model":"smollm2","messages":[]}',
    "unknown role": b'{"model":"smollm2","messages":[{"role":"wizard","content":"x"}]}',
    "image part": b'{"model":"smollm2","messages":[{"role":"user","content":[{"type":"image_url",'
                  b'"image_url":{"url":"file:///etc/passwd"}}]}]}',
}


def assert_envelope(response: httpx.Response, statuses=(400,)):
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert response.headers.get("x-request-id")
    return error


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hostile_bodies_get_4xx_fast(http, name):
    route = "/v1/chat/completions" if b"messages" in HOSTILE_BODIES[name] else "/v1/completions"
    start = time.monotonic()
    response = http.post(route, content=HOSTILE_BODIES[name], headers={"content-type": "application/json"})
    elapsed_s = time.monotonic() - start
    error = assert_envelope(response, (400, 404))
    assert "\ufffd" not in error["message"] and "etc/passwd" not in error["message"]
    assert elapsed_s < 1.0
    assert http.post("/v1/completions", json=VALID).status_code == 200  # still serving


def test_wrong_content_type_is_415(http):
    response = http.post("/v1/completions", content=b'{"model":"smollm2","prompt":"x"}',
                         headers={"content-type": "text/plain"})
    assert_envelope(response, (415,))


def test_oversized_body_is_413_with_content_length_and_chunked(http):
    big = b'{"model":"smollm2","prompt":"' + b"a" * (9 * 1024 * 1024) + b'"}'
    assert_envelope(http.post("/v1/completions", content=big), (413,))

    # Chunked, over a raw socket: the server may stop reading mid-upload, so the client keeps
    # whatever it answered and the test requires that answer to be the 413 (httpx would raise a
    # write error first and hide it).
    port = int(str(http.base_url).rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            for i in range(0, len(big), 1 << 16):
                piece = big[i:i + (1 << 16)]
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        except OSError:
            pass  # the server closed its end; its answer is already in our receive buffer
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert http.post("/v1/completions", json=VALID).status_code == 200


def test_oversized_header_is_rejected(base_url):
    response = httpx.get(base_url + "/health/live", headers={"x-big": "a" * 20_000})
    assert response.status_code in (400, 413, 431)


def test_unknown_route_and_method_are_envelopes(http):
    assert assert_envelope(http.get("/v1/nothing"), (404,))["code"] == "not_found"
    wrong_method = http.get("/v1/completions")
    assert assert_envelope(wrong_method, (405,))["code"] == "method_not_allowed"
    assert "POST" in wrong_method.headers["allow"]  # RFC 9110: a 405 names the allowed methods


def test_request_id_rules(http):
    ok = http.post("/v1/completions", json=VALID, headers={"x-request-id": "my-id.1"})
    assert ok.headers["x-request-id"] == "my-id.1"
    generated = http.post("/v1/completions", json=VALID)
    assert len(generated.headers["x-request-id"]) == 32
    assert assert_envelope(http.post("/v1/completions", json=VALID, headers={"x-request-id": "bad id!"}))[
        "param"] == "X-Request-ID"
    repeated = http.post("/v1/completions", json=VALID, headers=[("x-request-id", "a"), ("x-request-id", "b")])
    assert_envelope(repeated)
    stream = http.post("/v1/completions", json={**VALID, "stream": True}, headers={"x-request-id": "stream-1"})
    assert stream.headers["x-request-id"] == "stream-1"


INJECTED = 'x\r\n{"forged": 1}\x1b[31m\x85\u2028\x00'


def _raw_request(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        return s.recv(4096)


def test_log_injection_in_headers_and_model_is_escaped(own_server):
    """Client text cannot forge a log line (CWE-117). The hostile value goes where client text
    comes closest to the log: an unknown field's name under --lenient (logged, through safe_repr),
    the model name (logged as a served name or `unknown`), and header values (refused by the HTTP
    parser or by X-Request-ID's rule). The escaping itself is tested in server/test_logs.py."""
    srv = own_server("--model", "fake=synthetic:step_us=1000,n_ctx=512", "--lenient", real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        ok = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1, INJECTED: 1},
                         headers={"X-Request-ID": "inject-1"})
        assert ok.status_code == 200
        assert client.post("/v1/completions", json={**VALID, "model": INJECTED}).status_code == 404
    for header in (b"X-Request-ID: a\x1b[31m\x7fb", b"User-Agent: ua\x1b[31m\x00", b"X-Model: \xe2\x80\xa8{}"):
        reply = _raw_request(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + header
                             + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert srv.terminate() == 0
    raw = srv.log_path.read_bytes()
    for forbidden in (b"\x1b", b"\x00", b"\x85", b"\xe2\x80\xa8", b"\r"):
        assert forbidden not in raw
    lines = raw.decode("utf-8").splitlines()  # splitlines also breaks at \x85 and U+2028
    assert not [line for line in lines if line.lstrip().startswith('{"forged"')]
    logged = [orjson.loads(line) for line in lines if "inject-1" in line]
    # The request was logged (so a forged line would be here), its field name as a placeholder
    # (gateway.http.errors.safe_repr) or, if that ever changes, escaped so that it parses back intact.
    ignored = [entry for entry in logged if entry["event"] == "ignored_unknown_fields"]
    assert len(ignored) == 1 and ignored[0]["fields"] in (["<str>"], [INJECTED]), logged


def test_slow_partial_request_does_not_block_others(base_url, http):
    host, port = base_url.removeprefix("http://").split(":")
    sockets = []
    try:
        for _ in range(20):
            s = socket.create_connection((host, int(port)))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            sockets.append(s)
        start = time.monotonic()
        assert http.get("/health/live").status_code == 200
        assert time.monotonic() - start < 0.5
        assert http.post("/v1/completions", json=VALID).status_code == 200
    finally:
        for s in sockets:
            s.close()


def test_huge_prompt_is_rejected_without_stalling_the_server(http, base_url):
    import threading

    outcome = {}

    def post_huge():
        body = {"model": "smollm2", "prompt": "lorem ipsum dolor sit amet " * 250_000, "max_tokens": 1}
        outcome["status"] = httpx.post(base_url + "/v1/completions", json=body, timeout=120).status_code

    worker = threading.Thread(target=post_huge)
    worker.start()
    slowest_s = 0.0
    while worker.is_alive():
        t0 = time.monotonic()
        assert http.get("/health/live").status_code == 200
        slowest_s = max(slowest_s, time.monotonic() - t0)
        time.sleep(0.02)
    worker.join()
    assert outcome["status"] == 400  # context_length_exceeded
    assert slowest_s < 0.5


def test_slowloris_is_closed_by_an_absolute_deadline(own_server):
    srv = own_server("--request-deadline-s", "2", "--model", "fake=synthetic:step_us=100,n_ctx=512",
                     real_model=False)
    srv.wait_ready()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(0.25)
    t0 = time.monotonic()
    closed_after_s = None
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        for _ in range(40):  # one header byte every 0.25 s: Sanic's own timer would never fire
            try:
                s.sendall(b"X")
                s.recv(4096)  # a 408 or EOF: the server ended this request
                closed_after_s = time.monotonic() - t0
                break
            except socket.timeout:
                continue  # still waiting: keep trickling
            except OSError:
                closed_after_s = time.monotonic() - t0
                break
    finally:
        s.close()
    assert closed_after_s is not None and closed_after_s < 4.0
    with httpx.Client(base_url=srv.base_url, timeout=10) as client:  # still serving
        assert client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1}).status_code == 200
    assert srv.terminate() == 0
