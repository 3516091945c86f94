"""Lanes running the real engine on SmolLM2 (threads=1, small max_tokens)."""
import asyncio
import os
import signal
import time

import pytest

from lanes import _runtime, smollm2_path
from lanes.api import Chunk, GenerationParams, LaneError, LaneModelSpec

from .conftest import wait_for

pytestmark = pytest.mark.real_model
RAW = [(0, 0, b"", b"")]


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
    a, da = await run(pool.submit("smollm2", prompt_ids, params, 1, framings=RAW))
    b, db = await run(pool.submit("smollm2", prompt_ids, params, 2, framings=RAW))
    assert a == b and a[0]  # greedy is deterministic
    assert da[0].finish_reason in ("length", "stop") and da[0].prompt_tokens == len(prompt_ids)
    assert 1 <= da[0].completion_tokens <= 8 and da[0].prefill_ns > 0


async def test_seeded_choices_are_reproducible(real_pool, prompt_ids):
    pool = real_pool()
    params = GenerationParams(max_tokens=6, temperature=1.0, seed=1234)
    framings = [(0, 0, b"[0:", b"]"), (1, 0, b"[1:", b"]")]
    a, da = await run(pool.submit("smollm2", prompt_ids, params, 1, num_choices=2, framings=framings))
    b, _ = await run(pool.submit("smollm2", prompt_ids, params, 2, num_choices=2, framings=framings))
    assert a == b and set(a) == {0, 1}
    assert a[0].startswith(b"[0:") and a[1].startswith(b"[1:")
    assert sorted(d.choice for d in da) == [0, 1]


async def test_concurrent_requests_on_one_replica_each_get_their_own_text(real_pool, prompt_ids):
    """Two greedy requests with different prompts batched on one lane: each gets exactly the text
    it gets when it runs alone (nothing of the other request's sequence leaks into it)."""
    pool = real_pool()
    tok = _runtime.Tokenizer(str(smollm2_path()))
    other_ids = tok.encode("The capital of France is", True, False)
    params = GenerationParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    alone_a, _ = await run(pool.submit("smollm2", prompt_ids, params, 1, framings=RAW))
    alone_b, _ = await run(pool.submit("smollm2", other_ids, params, 2, framings=RAW))
    assert alone_a != alone_b
    (a, da), (b, db) = await asyncio.gather(run(pool.submit("smollm2", prompt_ids, params, 3, framings=RAW)),
                                            run(pool.submit("smollm2", other_ids, params, 4, framings=RAW)))
    assert (a, b) == (alone_a, alone_b)
    assert [(d.prompt_tokens, d.completion_tokens) for d in da + db] == [(len(prompt_ids), 8), (len(other_ids), 8)]


async def test_cancel_frees_the_slot_within_one_token(real_pool, prompt_ids):
    pool = real_pool()
    stream = pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=500, ignore_eos=True), 1, framings=RAW)
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
    await wait_for(lambda: pool.capacity("smollm2")[0] == 0, 5, "slot freed")
    assert time.monotonic() - t0 <= 2 * token_s + 0.05
    assert pool.statuses()[0].state == "ready"
    assert pool.statuses()[0].restarts == 0
    _, dones = await run(pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=2), 2, framings=RAW))
    assert len(dones) == 1


async def test_sigkill_mid_generation(real_pool, prompt_ids):
    pool = real_pool(backoff_initial_s=0.05)
    pid = pool.statuses()[0].pid
    stream = pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=500, ignore_eos=True), 1, framings=RAW)
    await stream.__anext__()
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(LaneError) as e:
        await run(stream)
    assert e.value.code == "lane_died" and time.monotonic() - t0 < 1.0
    await wait_for(lambda: pool.statuses()[0].state == "ready", 30, "respawned lane")
    assert pool.statuses()[0].restarts == 1 and pool.statuses()[0].pid != pid
    _, dones = await run(pool.submit("smollm2", prompt_ids, GenerationParams(max_tokens=2), 2, framings=RAW))
    assert len(dones) == 1


def test_bad_model_file_is_a_clean_startup_failure(make_pool, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    pool = make_pool([LaneModelSpec("smollm2", str(smollm2_path())), LaneModelSpec("broken", str(bad))])
    from lanes.api import LaneStartupError
    with pytest.raises(LaneStartupError, match="broken"):
        pool.start()
