"""`laneserve ps` and `laneserve run` against a synthetic server (no weights): the ps table while
a request holds a slot, and an interactive chat driven through a pseudo-terminal."""
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import gateway
from gateway.cli.main import main
from gateway.cli.ps import render


def _wait(predicate, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _slots_in_use(base_url: str) -> int:
    return httpx.get(base_url + "/health/ready", timeout=5).json()["models"]["fake"]["slots_in_use"]


def test_render_table():
    ready = {"status": "ready", "models": {"m": {
        "status": "ready", "ready_replicas": 1, "slots": 8, "slots_in_use": 3, "queued": 2, "ctx_per_slot": 4096,
        "lanes": [{"index": 0, "state": "serving", "pid": 42, "restarts": 0, "slots": 8, "slots_in_use": 3,
                   "kv_cache_bytes": 3 << 20}]}}}
    lines = render(ready, {"models": [{"name": "m", "size": 92 << 20}]}).splitlines()
    assert lines[0] == "server: ready"
    header = lines[2].split()
    assert header[:2] == ["MODEL", "STATUS"]
    assert lines[3].split() == ["m", "ready", "loaded", "1/1", "3/8", "2", "4096", "92.0", "MiB"]
    assert lines[-1].split() == ["m", "0", "serving", "42", "3/8", "0", "3.0", "MiB"]


def test_render_lists_each_models_adapters():
    lane = {"index": 0, "state": "ready", "pid": 42, "restarts": 0, "slots": 8, "slots_in_use": 0}
    model = {"status": "ready", "ready_replicas": 1, "slots": 8, "slots_in_use": 0, "queued": 0,
             "ctx_per_slot": 4096, "lanes": [lane]}
    ready = {"status": "ready", "models": {
        "m": {**model, "lora": [{"id": 1, "name": "pirate"}, {"id": 2, "name": "calm"}],
              "lora_errors": {"broken": "not a LoRA adapter"}},
        "n": {**model, "lora": [], "lora_errors": {}}}}
    text = render(ready, {})
    table = text.split("\n\n")[-1].splitlines()
    assert table[0].split() == ["MODEL", "ADAPTER", "ID", "STATUS"]
    assert [r.split() for r in table[1:]] == [["m", "pirate", "1", "loaded"], ["m", "calm", "2", "loaded"],
                                              ["m", "broken", "-", "failed:", "not", "a", "LoRA", "adapter"]]
    without = {"status": "ready", "models": {"n": ready["models"]["n"]}}
    assert "ADAPTER" not in render(without, {})


def test_render_shows_each_models_prompt_cache():
    lane = {"index": 0, "state": "ready", "pid": 42, "restarts": 0, "slots": 2, "slots_in_use": 0}
    model = {"status": "ready", "ready_replicas": 1, "slots": 2, "slots_in_use": 0, "queued": 0,
             "ctx_per_slot": 4096, "lanes": [lane]}
    cache = {"bytes": 3 << 20, "budget_bytes": 1 << 30, "entries": 2, "hits": 5, "hit_tokens": 812, "evictions": 1}
    ready = {"status": "ready", "models": {
        "m": {**model, "prompt_cache": cache},
        "empty": {**model, "prompt_cache": {**cache, "bytes": 0, "entries": 0, "hits": 0, "hit_tokens": 0,
                                            "evictions": 0}},
        "off": {**model, "prompt_cache": {**cache, "budget_bytes": 0}},  # --cache-ram-mib 0: no line
        "new": {**model, "prompt_cache": None}}}  # no lane has reported yet: no line
    table = render(ready, {}).split("\n\n")[-1].splitlines()
    assert table[0].split() == ["MODEL", "PROMPT", "CACHE", "ENTRIES", "HITS", "HIT", "TOKENS", "EVICTIONS"]
    assert [r.split() for r in table[1:]] == [["m", "3.0", "MiB", "/", "1.0", "GiB", "2", "5", "812", "1"],
                                              ["empty", "0", "B", "/", "1.0", "GiB", "0", "0", "0", "0"]]
    assert "PROMPT CACHE" not in render({"status": "ready", "models": {"off": ready["models"]["off"]}}, {})


def test_loaded_column_says_busy_idle_expiring_or_unloaded():
    from gateway.cli.ps import loaded_text

    loaded = {"status": "loaded", "on_demand": True, "in_use": False, "expires_in_s": 252.4, "error": None}
    assert loaded_text(loaded) == "idle, unloads in 4m12s"
    assert loaded_text({**loaded, "expires_in_s": 3 * 3600 + 60}) == "idle, unloads in 3h01m"
    assert loaded_text({**loaded, "expires_in_s": None}) == "idle, kept"
    assert loaded_text({**loaded, "in_use": True}) == "busy"
    assert loaded_text({**loaded, "status": "unloaded", "expires_in_s": None}) == "unloaded"
    assert loaded_text({**loaded, "status": "loading"}) == "loading"
    assert loaded_text(None) == "loaded"  # a server without models on demand


def test_ps_unreachable(capsys):
    assert main(["ps", "--url", "http://127.0.0.1:9"]) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_ps_shows_a_busy_slot(own_server, capsys):
    srv = own_server("--model", "fake=synthetic:step_us=20000", real_model=False)
    srv.wait_ready()
    done = threading.Event()

    def long_request():
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400,
                "stream": True}
        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json=body, timeout=60) as resp:
            for _ in resp.iter_bytes():
                if done.is_set():
                    break  # closing the stream cancels the generation

    worker = threading.Thread(target=long_request)
    worker.start()
    try:
        assert _wait(lambda: _slots_in_use(srv.base_url) == 1)
        assert main(["ps", "--url", srv.base_url]) == 0
    finally:
        done.set()
        worker.join(30)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "server: ready"
    row = next(line.split() for line in lines[3:] if line.startswith("fake"))
    assert row[1:5] == ["ready", "busy", "1/1", "1/" + row[4].split("/")[1]] and row[5] == "0"
    lane = next(line.split() for line in lines[5:] if line.startswith("fake"))
    assert lane[1] == "0" and lane[4].startswith("1/")


def test_run_streams_stops_and_quits(own_server):
    pexpect = pytest.importorskip("pexpect")
    srv = own_server("--model", "fake=synthetic:step_us=20000", real_model=False)
    srv.wait_ready()
    env = {**os.environ, "PYTHONPATH": str(Path(gateway.__file__).resolve().parent.parent)}
    env.pop("LANESERVE_API_KEY", None)
    # SIGINT at its default in the child: a parent that ignores it (a job started with `&` by a
    # non-interactive shell) would pass SIG_IGN down, and Python then never raises KeyboardInterrupt.
    child = pexpect.spawn(sys.executable, ["-m", "gateway.cli", "run", "fake", "--url", srv.base_url],
                          env=env, encoding="utf-8", timeout=30,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        child.expect_exact(">>> ")
        child.sendline("hello there")
        child.expect_exact("4 5 ")  # streamed synthetic tokens "i " arrive one by one
        assert _slots_in_use(srv.base_url) == 1
        # Ctrl-C: stops this answer, not the program. SIGINT straight to the process: the ^C character
        # depends on the terminal's mode, which readline changes around each prompt.
        child.kill(signal.SIGINT)
        child.expect_exact("(stopped)")
        child.expect_exact(">>> ")
        assert _wait(lambda: _slots_in_use(srv.base_url) == 0, 5.0)  # the generation was cancelled
        child.sendline("and again")
        child.expect_exact("2 3 ")
        child.kill(signal.SIGINT)
        child.expect_exact(">>> ")
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0

    def chats() -> list[dict]:
        records = [json.loads(line) for line in srv.records_path.read_text().splitlines()]
        return [r for r in records if r.get("model") == "fake"]

    # A record is written when its handler ends, which can follow the client's exit.
    assert _wait(lambda: len(chats()) == 2, 5.0), chats()
    assert [r["outcome"] for r in chats()] == ["disconnect", "disconnect"]  # connection closed by Ctrl-C


def test_run_keeps_the_history(monkeypatch, capsys):
    """Each request carries the conversation so far, a stopped answer as shown; /clear forgets."""
    from gateway.cli import run as chat_cli

    sent = []
    lines = iter(["first", "second", "/clear", "third", "/bye"])

    def fake_stream(url, model, messages, api_key=None):
        sent.append([dict(m) for m in messages])
        yield "partial "
        if len(sent) == 1:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the first answer
        yield "answer"

    monkeypatch.setattr(chat_cli, "stream_chat", fake_stream)
    monkeypatch.setattr("builtins.input", lambda prompt: next(lines))
    assert chat_cli.run("m", "http://127.0.0.1:1") == 0
    assert sent[0] == [{"role": "user", "content": "first"}]
    assert sent[1] == [{"role": "user", "content": "first"}, {"role": "assistant", "content": "partial "},
                       {"role": "user", "content": "second"}]
    assert sent[2] == [{"role": "user", "content": "third"}]
    out = capsys.readouterr().out
    assert "(stopped)" in out and "partial answer" in out
