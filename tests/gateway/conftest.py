"""Fixtures for gateway integration tests: ONE real server (SmolLM2, 1 replica, 1 thread) per
session on a free loopback port, reused by most tests; tests that stop or break a server start
their own."""
from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import httpx
import pytest

# The one launcher (shared with benchmarks/); ServerProcess: .proc .port .base_url .log_path .records_path
# .log_text() .wait_ready() .terminate() .kill(). STOP_TIMEOUT_S: the reliability battery's too.
from gateway.cli.bench.launcher import STOP_TIMEOUT_S, free_port, start_laneserve  # noqa: F401
from gateway.cli.bench.launcher import Launched as ServerProcess

# Small enough that a full-context prefill (the context-limit tests) takes ~3 s on one thread.
CTX_SIZE = 512


def start_server(tmp_dir: Path, *extra_args: str, command: list[str] | None = None, records: bool = True,
                 env: dict | None = None) -> ServerProcess:
    """`laneserve serve` (or `command`, with {port} substituted) on a free loopback port, with
    the tests' defaults (1 replica, 1 thread, CTX_SIZE) and, with `records`, a records file; run
    in tmp_dir, so a source checkout never shadows an installed build by accident."""
    port = free_port()
    records_path = tmp_dir / f"records-{port}.jsonl" if records else None
    defaults = () if command is not None else ("--replicas", "1", "--threads", "1", "--ctx-size", str(CTX_SIZE))
    return start_laneserve(*defaults, *extra_args, command=command, port=port, log_path=tmp_dir / f"server-{port}.log",
                           records_path=records_path, env=env, cwd=tmp_dir, name="server")


def serving_stack_missing(real_model: bool = True) -> str | None:
    """Why a server cannot run here (lanes, tokenizer or engine not landed yet), else None.
    `real_model=False`: only the lanes' synthetic backend is needed (plus SmolLM2's tokenizer)."""
    if importlib.util.find_spec("lanes.pool") is None:
        return "lanes.pool is not available (lanes issue not landed)"
    try:
        from lanes import _runtime
    except ImportError as exc:
        return f"native runtime not built: {exc}"
    if not hasattr(_runtime, "Tokenizer"):
        return "lanes._runtime.Tokenizer is not available yet"
    if real_model:
        try:
            from lanes import Model  # noqa: F401  (the engine's in-process API)
        except ImportError:
            return "the inference engine (lanes.Model) has not landed yet"
    try:
        from lanes import smollm2_path

        smollm2_path()
    except FileNotFoundError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def running_server(tmp_dir: Path, *extra_args: str, real_model: bool = True, **kwargs):
    """A fixture's server: skipped without the serving stack, ready when it is yielded, and
    stopped at the end — cleanly (exit 0, else the log tail) when the block ended normally."""
    reason = serving_stack_missing(real_model)
    if reason:
        pytest.skip(reason)
    srv = start_server(tmp_dir, *extra_args, **kwargs)
    try:
        srv.wait_ready()
        yield srv
    except BaseException:
        srv.kill()
        raise
    code = srv.terminate()
    assert code == 0, srv.log_text()[-4000:]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    # The lanes' heartbeat is not updated inside one long prefill step yet; a generous timeout
    # keeps the full-context tests from being taken for a hung lane.
    with running_server(tmp_path_factory.mktemp("server"), "--keepalive-interval-s", "1",
                        "--heartbeat-timeout-s", "30") as srv:
        yield srv


@pytest.fixture(scope="session")
def base_url(server) -> str:
    return server.base_url


@pytest.fixture
def http(base_url):
    with httpx.Client(base_url=base_url, timeout=60.0) as client:
        yield client


def openai_for(base_url: str):
    """The `openai` client the tests use against `base_url` (close it)."""
    from openai import OpenAI

    return OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60.0)


@pytest.fixture
def openai_client(base_url):
    client = openai_for(base_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def think_server(tmp_path_factory):
    """`think`: the tiny scripted thinking model (thinking_gguf.py), beside `smollm2` (no thinking)."""
    from . import thinking_gguf

    tmp = tmp_path_factory.mktemp("think")
    path = thinking_gguf.write_thinking_gguf(tmp / "tiny-think.gguf")
    with running_server(tmp, "--model", f"think={path}", "--model", "smollm2=smollm2") as srv:
        yield srv


@pytest.fixture(scope="module")
def harmony_server(tmp_path_factory):
    """`harmony`: the tiny scripted gpt-oss model (harmony_gguf.py); `harmony-tools`: its tool-calling twin."""
    from . import harmony_gguf

    tmp = tmp_path_factory.mktemp("harmony")
    path = harmony_gguf.write_harmony_gguf(tmp / "tiny-harmony.gguf")
    tools_path = harmony_gguf.write_harmony_tools_gguf(tmp / "tiny-harmony-tools.gguf")
    # A byte-level vocabulary: gpt-oss's system turn and two tools take ~550 tokens.
    with running_server(tmp, "--model", f"harmony={path}", "--model", f"harmony-tools={tools_path}",
                        "--ctx-size", "1024") as srv:
        yield srv


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    """The path of a random-weight gemma3 vision projector (tests/csrc/vision/mmproj_gguf.py) for Gemma 3 270M."""
    from .vision.pictures import mmproj_gguf

    return str(mmproj_gguf.write_mmproj(tmp_path_factory.mktemp("mmproj") / "gemma3.gguf", mmproj_gguf.SPECS["gemma3"]))


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory, mmproj):
    """`g`: Gemma 3 270M with the `mmproj` projector (36 tokens per image), beside `plain` (text only, synthetic)."""
    with running_server(tmp_path_factory.mktemp("vision"), "--model", "g=gemma3", "--mmproj", f"g={mmproj}",
                        "--model", "plain=synthetic:step_us=1", "--parallel", "8",
                        "--heartbeat-timeout-s", "30") as srv:
        yield srv


@pytest.fixture(scope="module")
def synthetic_server(tmp_path_factory):
    """A server whose one model is the lanes' synthetic backend: deterministic text ("<i> " per
    step, with JSON-hostile characters every 7th step), slow enough to observe, no weights."""
    # --ctx-size caps a lane's per-slot context, the synthetic one's too (the default above is 512).
    with running_server(tmp_path_factory.mktemp("synthetic"), "--model",
                        "fake=synthetic:step_us=2000,prefill_us_per_token=1000,n_ctx=1024", "--ctx-size", "1024",
                        "--keepalive-interval-s", "0.2", real_model=False) as srv:
        yield srv


@pytest.fixture
def own_server(tmp_path):
    """Start a dedicated server (for tests that stop or break it); always cleaned up."""
    started = []

    def start(*args, real_model: bool = True, **kwargs) -> ServerProcess:
        reason = serving_stack_missing(real_model)
        if reason:
            pytest.skip(reason)
        srv = start_server(tmp_path, *args, **kwargs)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.kill()


def read_sse(response: httpx.Response) -> list:
    """Parse an SSE body strictly: `data: <json>` events (dicts), "[DONE]", or ":" comments."""
    events = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        assert "\n" not in block, f"multi-line SSE event: {block!r}"
        if block.startswith(":"):
            events.append(":")
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@pytest.fixture
def sse():
    return read_sse
