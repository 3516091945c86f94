"""A lane splits reasoning from content (channel 1) on the tiny scripted thinking model
(tests/gateway/thinking_gguf.py): streamed per channel and collected per channel, with generation
starting outside or inside the block."""
import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from lanes import _runtime
from lanes.api import ChoiceDone, Chunk, GenerationParams, LaneModelSpec, ReasoningMarkers


def _thinking_gguf():
    path = Path(__file__).resolve().parents[1] / "gateway" / "thinking_gguf.py"
    spec = importlib.util.spec_from_file_location("_lanes_thinking_gguf", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


TG = _thinking_gguf()
FRAMINGS = [(0, 0, b"C[", b"]"), (0, 1, b"R[", b"]")]


@pytest.fixture
def think_pool(make_pool, tmp_path):
    async def make():
        path = TG.write_thinking_gguf(tmp_path / "think.gguf")
        pool = make_pool([LaneModelSpec("think", str(path), threads=1, ctx_size=256, num_slots=2,
                                        max_batch_tokens=64)])
        pool.start()
        pool.attach(asyncio.get_running_loop())
        ids = list(_runtime.Tokenizer(str(path)).encode("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
                                                        False, True))
        return pool, ids
    return make


def _params(starts_inside: bool, **kw) -> GenerationParams:
    return GenerationParams(max_tokens=32, temperature=0.0,
                            reasoning=ReasoningMarkers("<think>", "</think>", starts_inside), **kw)


async def _run(stream):
    data, dones = b"", []
    async for item in stream:
        if isinstance(item, Chunk):
            data += item.data
        else:
            assert isinstance(item, ChoiceDone)
            dones.append(item)
    return data, dones


def _channels(data: bytes) -> tuple[bytes, bytes]:
    content, reasoning = b"", b""
    for event in data.split(b"]")[:-1]:
        if event.startswith(b"C["):
            content += event[2:]
        else:
            assert event.startswith(b"R["), event
            reasoning += event[2:]
    return content, reasoning


async def test_streamed_and_collected_per_channel(think_pool):
    pool, ids = await think_pool()
    data, dones = await _run(pool.submit("think", ids, _params(False), 1, framings=FRAMINGS))
    assert _channels(data) == (TG.CONTENT.encode(), TG.REASONING.encode())
    assert dones[0].finish_reason == "stop" and dones[0].completion_tokens == 13
    _, dones = await _run(pool.submit("think", ids, _params(False), 2, collect=True))
    assert (dones[0].text, dones[0].reasoning) == (TG.CONTENT.encode(), TG.REASONING.encode())


async def test_generation_starting_inside_the_block(think_pool):
    pool, ids = await think_pool()
    _, dones = await _run(pool.submit("think", ids, _params(True), 3, collect=True))
    # The open marker is text inside a block the prompt opened; the close marker ends it.
    assert (dones[0].text, dones[0].reasoning) == (TG.CONTENT.encode(), b"<think>" + TG.REASONING.encode())


async def test_without_markers_everything_is_content(think_pool):
    pool, ids = await think_pool()
    params = GenerationParams(max_tokens=32, temperature=0.0)
    _, dones = await _run(pool.submit("think", ids, params, 4, collect=True))
    assert dones[0].text == b"<think>Hmm, thinking</think>\\n\\nThe answer is 42." and dones[0].reasoning == b""
