"""LoRA adapters through the lane pool on real SmolLM2 lanes: adapters from the spec loaded before
the handshake, load/unload at run time, bad files failing only that adapter with a clear error,
a request's adapters on the wire, and a SIGKILLed lane coming back with the same adapters."""
import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from lanes import _runtime, smollm2_path
from lanes.api import AdapterError, GenerationParams, LaneModelSpec

from .conftest import text_of, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "csrc" / "model"))
from lora_gguf import ATTENTION, AdapterSpec, Q, cached_adapter, write_adapter  # noqa: E402

pytestmark = pytest.mark.real_model
RAW = [(0, 0, b"", b"")]
ALL_R16 = AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=41)
ATTN_R8 = AdapterSpec(rank=8, targets=ATTENTION, rel_norm=0.15, seed=42)


@pytest.fixture(scope="module")
def files():
    base = Path(smollm2_path())
    return {"all16": str(cached_adapter(base, ALL_R16)), "attn8": str(cached_adapter(base, ATTN_R8))}


@pytest.fixture
def prompt_ids():
    return _runtime.Tokenizer(str(smollm2_path())).encode("Once upon a time, in a small village,", True, False)


def start(make_pool, lora=()):
    pool = make_pool([LaneModelSpec("smollm2", str(smollm2_path()), threads=1, ctx_size=1024, num_slots=4,
                                    lora=tuple(lora))])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    return pool


async def test_spec_adapters_runtime_load_unload_and_requests(make_pool, files, prompt_ids, tmp_path):
    bad = tmp_path / "bad.gguf"
    write_adapter(bad, Path(smollm2_path()), AdapterSpec(targets=("attn_q",)), arch="gemma3")
    pool = start(make_pool, [("all16", files["all16"]), ("broken", str(bad))])
    assert [a.name for a in pool.adapters("smollm2")] == ["all16"]
    assert "does not match the base model's 'llama'" in pool.adapter_errors["smollm2"]["broken"]
    [all16] = pool.adapters("smollm2")
    assert all16.tensor_bytes > 0

    greedy = dict(max_tokens=12, temperature=0.0, ignore_eos=True)
    base = await text_of(pool.submit("smollm2", prompt_ids, GenerationParams(**greedy), 1, framings=RAW))
    tuned = await text_of(pool.submit("smollm2", prompt_ids, GenerationParams(**greedy, lora=((all16.id, 1.0),)),
                                      2, framings=RAW))
    assert tuned != base

    info = await pool.load_adapter("smollm2", "attn8", files["attn8"])
    assert info.name == "attn8" and info.id not in (all16.id,) and info.path == files["attn8"]
    assert [a.name for a in pool.adapters("smollm2")] == ["all16", "attn8"]
    # Several adapters at once, beside base and single-adapter requests: each as when alone.
    both = GenerationParams(**greedy, lora=((all16.id, 1.0), (info.id, 0.5)))
    alone = await text_of(pool.submit("smollm2", prompt_ids, both, 3, framings=RAW))
    results = await asyncio.gather(
        text_of(pool.submit("smollm2", prompt_ids, both, 4, framings=RAW)),
        text_of(pool.submit("smollm2", prompt_ids, GenerationParams(**greedy), 5, framings=RAW)),
        text_of(pool.submit("smollm2", prompt_ids, GenerationParams(**greedy, lora=((all16.id, 1.0),)), 6,
                            framings=RAW)))
    assert results == [alone, base, tuned]

    with pytest.raises(AdapterError, match="does not match"):
        await pool.load_adapter("smollm2", "broken-again", str(bad))
    assert [a.name for a in pool.adapters("smollm2")] == ["all16", "attn8"]
    with pytest.raises(AdapterError, match="already has"):
        await pool.load_adapter("smollm2", "attn8", files["attn8"])
    with pytest.raises(AdapterError, match="no file"):
        await pool.load_adapter("smollm2", "missing", str(tmp_path / "nope.gguf"))

    # Unload while a request using it runs: it finishes with its adapter; new requests are refused.
    long = GenerationParams(max_tokens=48, temperature=0.0, ignore_eos=True, lora=((info.id, 1.0),))
    expected = await text_of(pool.submit("smollm2", prompt_ids, long, 7, framings=RAW))
    running = asyncio.ensure_future(text_of(pool.submit("smollm2", prompt_ids, long, 8, framings=RAW)))
    await asyncio.sleep(0.05)
    pool.unload_adapter("smollm2", "attn8")
    assert await running == expected
    with pytest.raises(ValueError, match="no LoRA adapter"):
        pool.submit("smollm2", prompt_ids, long, 9, framings=RAW)
    with pytest.raises(AdapterError):
        pool.unload_adapter("smollm2", "attn8")


async def test_respawned_lane_comes_back_with_the_same_adapters(make_pool, files, prompt_ids):
    pool = start(make_pool, [("all16", files["all16"])])
    info = await pool.load_adapter("smollm2", "attn8", files["attn8"])
    params = GenerationParams(max_tokens=10, temperature=0.0, ignore_eos=True, lora=((info.id, 1.0),))
    before = await text_of(pool.submit("smollm2", prompt_ids, params, 1, framings=RAW))
    replica = pool._replicas["smollm2"][0]
    old_pid = replica.pid
    os.kill(old_pid, signal.SIGKILL)
    await wait_for(lambda: replica.pid not in (None, old_pid) and replica.state == "ready", 60, "respawn")
    assert [a.name for a in pool.adapters("smollm2")] == ["all16", "attn8"]
    assert await text_of(pool.submit("smollm2", prompt_ids, params, 2, framings=RAW)) == before
