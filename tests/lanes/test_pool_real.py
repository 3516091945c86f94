"""Lanes running the real engine on SmolLM2 (threads=1, small max_tokens)."""
import asyncio
import os
import signal
import time

import pytest

from lanes import _runtime, smollm2_path
from lanes.api import ChoiceDone, Chunk, Framing, GenerationParams, LaneError, LaneModelSpec

from .conftest import wait_for

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif("engine" not in _runtime.lane_backends(), reason="engine not built into the runtime yet"),
]
RAW = Framing(b"", b"")


@pytest.fixture
def prompt_ids():
    tok = _runtime.Tokenizer(str(smollm2_path()))
    return tok.encode("Once upon a time, in a small village,", True, False)


@pytest.fixture
def real_pool(make_pool):
    def make(**config):
        pool = make_pool([LaneModelSpec("smollm2", str(smollm2_path()), threads=1, ctx_size=2048)], **config)
        pool.start()
        pool.attach(asyncio.get_running_loop())
        return pool
    return make


async def run(stream):
    text, dones = {}, []
    async for item in stream:
        if isinstance(item, Chunk):
            text[item.choice] = text.get(item.choice, b"") + item.data
        else:
            dones.append(item)
    return text, dones


async def test_handshake_and_greedy_generation(real_pool, prompt_ids):
    pool = real_pool()
    info = pool.lane_info("smollm2")
    assert info["n_vocab"] == 49152 and info["n_ctx"] > 0
    params = GenerationParams(max_tokens=8, temperature=0.0)
    a, da = await run(pool.submit("smollm2", prompt_ids, params, [RAW], 1))
    b, db = await run(pool.submit("smollm2", prompt_ids, params, [RAW], 2))
    assert a == b and a[0]  # greedy is deterministic
    assert da[0].finish_reason in ("length", "stop") and da[0].prompt_tokens == len(prompt_ids)
    assert 1 <= da[0].completion_tokens <= 8 and da[0].prefill_ns > 0


async def test_seeded_choices_are_reproducible(real_pool, prompt_ids):
    pool = real_pool()
    params = GenerationParams(max_tokens=6, temperature=1.0, seed=1234)
    framings = [Framing(b"[0:", b"]"), Framing(b"[1:", b"]")]
    a, da = await run(pool.submit("smollm2", prompt_ids, params, framings, 1))
    b, _ = await run(pool.submit("smollm2", prompt_ids, params, framings, 2))
    assert a == b and set(a) == {0, 1}
    assert [d.choice for d in da] == [0, 1]


async def test_cancel_frees_the_lane_within_one_token(real_pool, prompt_ids):
    pool = real_pool()
    stream = pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=500, ignore_eos=True), [RAW], 1)
    t_prev = None
    gaps = []
    async for item in stream:
        now = time.monotonic()
        if t_prev is not None:
            gaps.append(now - t_prev)
        t_prev = now
        if len(gaps) >= 4:
            break
    token_s = max(gaps)
    t0 = time.monotonic()
    stream.cancel()
    await wait_for(lambda: pool.statuses()[0].state == "ready", 5, "lane freed")
    assert time.monotonic() - t0 <= 2 * token_s + 0.02
    assert pool.statuses()[0].restarts == 0
    _, dones = await run(pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=2), [RAW], 2))
    assert len(dones) == 1


async def test_sigkill_mid_generation(real_pool, prompt_ids):
    pool = real_pool(backoff_initial_s=0.05)
    pid = pool.statuses()[0].pid
    stream = pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=500, ignore_eos=True), [RAW], 1)
    await stream.__anext__()
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(LaneError) as e:
        await run(stream)
    assert e.value.code == "lane_died" and time.monotonic() - t0 < 1.0
    await wait_for(lambda: pool.statuses()[0].state == "ready", 30, "respawned lane")
    assert pool.statuses()[0].restarts == 1 and pool.statuses()[0].pid != pid
    _, dones = await run(pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=2), [RAW], 2))
    assert len(dones) == 1


def test_bad_model_file_is_a_clean_startup_failure(make_pool, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    pool = make_pool([LaneModelSpec("smollm2", str(smollm2_path())), LaneModelSpec("broken", str(bad))])
    from lanes.api import LaneStartupError
    with pytest.raises(LaneStartupError, match="broken"):
        pool.start()
