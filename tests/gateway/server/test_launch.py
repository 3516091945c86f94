"""Launch paths and shutdown: `laneserve serve` with curl, the sanic CLI factory form, a startup
failure that exits non-zero with a clear message, and SIGTERM draining in-flight streams."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2


def curl(*args: str) -> str:
    return subprocess.run(["curl", "-sS", "--max-time", "60", *args], capture_output=True, text=True, timeout=90,
                          check=True).stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_stream_and_non_stream(base_url):
    body = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
    reply = json.loads(curl(base_url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d", body))
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
    stream_body = json.dumps({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8, "stream": True})
    out = curl("-N", base_url + "/v1/completions", "-H", "Content-Type: application/json", "-d", stream_body)
    events = [e for e in out.split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"
    # curl -d without a JSON Content-Type: a clear 415, not a crash
    rejected = json.loads(curl(base_url + "/v1/completions", "-d", stream_body))
    assert "Content-Type" in rejected["error"]["message"]


def test_startup_failure_exits_non_zero_with_a_clear_message(own_server, tmp_path):
    srv = own_server("--model", f"x={tmp_path / 'missing.gguf'}", records=False)
    assert srv.proc.wait(60) != 0
    assert "startup failed" in srv.log_text() and "missing.gguf" in srv.log_text()


def test_broken_model_file_fails_startup_cleanly(own_server, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    srv = own_server("--model", f"x={bad}", records=False)
    assert srv.proc.wait(60) != 0
    assert "startup failed" in srv.log_text()
    leftovers = [p.name for p in Path("/dev/shm").iterdir() if "laneserve" in p.name and str(srv.proc.pid) in p.name]
    assert leftovers == []


def test_sanic_cli_factory_form(own_server):
    sanic = [sys.executable, "-m", "sanic", "gateway.app:create_app", "--factory", "--host", "127.0.0.1",
             "--port", "{port}", "--model", "smollm2", "--ctx-size", "1024", "--lenient", "true"]
    srv = own_server(command=sanic, records=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=60) as client:
        card = client.get("/v1/models").json()["data"][0]
        assert card["id"] == "smollm2" and card["max_model_len"] == 1024
        lenient = client.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                                                        "mirostat": 2})
        assert lenient.status_code == 200
    # Sanic's manager deadlocks on SIGTERM while it is still polling its workers' startup acks
    # (a signal inside a SyncManager proxy call), and its monitor loop can read a worker's state
    # as None while a SIGTERM arrives within about a second of readiness (AttributeError in
    # WorkerManager._sync_states, exit 1; seen once in CI): the server may answer before the
    # manager is done, so give it a few seconds, as any real operator does.
    time.sleep(3.0)
    assert srv.terminate() == 0


def start_long_stream(srv) -> tuple[list[str], threading.Thread]:
    """A 500-token stream on a background thread; returns once its first line arrived."""
    lines: list[str] = []
    started = threading.Event()

    def stream():
        with httpx.Client(base_url=srv.base_url, timeout=60) as client:
            body = {"model": "smollm2", "prompt": "Count:", "max_tokens": 500, "ignore_eos": True, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as response:
                for line in response.iter_lines():
                    if line:
                        lines.append(line)
                        started.set()

    worker = threading.Thread(target=stream, daemon=True)
    worker.start()
    assert started.wait(30)
    return lines, worker


def test_sigterm_drains_in_flight_streams_and_exits_0(own_server):
    srv = own_server("--drain-grace-s", "3")
    srv.wait_ready()
    lines, worker = start_long_stream(srv)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    refused = None
    try:
        refused = httpx.post(srv.base_url + "/v1/completions", json={"model": "smollm2", "prompt": "x"}, timeout=5)
    except httpx.HTTPError:
        pass  # the listener may already be closed: also a refusal
    if refused is not None:
        assert refused.status_code == 503 and "retry-after" in refused.headers
    assert srv.proc.wait(30) == 0
    assert time.monotonic() - t0 < 3 + 10
    worker.join(10)
    assert lines[-1] == "data: [DONE]"
    assert '"error"' in lines[-2] or '"finish_reason":"length"' in lines[-2]
    leftovers = [p.name for p in Path("/dev/shm").iterdir() if str(srv.proc.pid) in p.name]
    assert leftovers == []


def test_sanic_cli_startup_failure_exits_non_zero_fast(own_server, tmp_path):
    sanic = [sys.executable, "-m", "sanic", "gateway.app:create_app", "--factory", "--host", "127.0.0.1",
             "--port", "{port}", "--model", f"x={tmp_path / 'missing.gguf'}"]
    srv = own_server(command=sanic, records=False)
    t0 = time.monotonic()
    assert srv.proc.wait(60) != 0
    assert time.monotonic() - t0 < 20
    assert "startup failed" in srv.log_text()


def test_second_sigterm_cuts_the_drain_short(own_server):
    srv = own_server("--drain-grace-s", "60")
    srv.wait_ready()
    lines, worker = start_long_stream(srv)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(20) == 0
    assert time.monotonic() - t0 < 10  # not the 60 s grace
    worker.join(10)
    assert lines[-1] == "data: [DONE]" and '"error"' in lines[-2]
