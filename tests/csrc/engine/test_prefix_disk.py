"""The prefix cache's disk tier in the engine (csrc/engine/disk_tier.h, BatchEngine prefix_cache_dir),
on both real models: pages a first engine wrote are read back by a NEW engine (a restart) and give
exactly the tokens of a cold prefill, for the same prompt and for another one sharing its prefix;
slot files (save_slot / restore_slot) carry a conversation's prefill into another engine."""
import gc
import shutil

import pytest

import lanes
from lanes import Model, _runtime

from .conftest import run_alone

SEEDED = dict(temperature=0.8, seed=4321)
GREEDY = dict(temperature=0.0)
PAGE = 64


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    path = str(lanes.smollm2_path() if request.param == "smollm2" else lanes.gemma3_path())
    return path, Model(path, threads=1, ctx_size=256)


def engine(path, disk_dir=None, **kw):
    return _runtime.BatchEngine(path, threads=2, ctx_size=1024, num_slots=2, max_batch_tokens=128,
                                prompt_cache_mib=64, prefix_cache_dir=str(disk_dir) if disk_dir else "", **kw)


def run(eng, rid, ids, max_tokens=24, **kw):
    """One request alone to its end (greedy unless told): (text, stats)."""
    return run_alone(eng, rid, ids, max_tokens, **(kw or GREEDY))


def prompts(tok):
    """(a ~600-token prompt, another one sharing all but its last line)."""
    rules = "".join(f"Rule {i}: answer plainly, name the place, keep it short and kind. " for i in range(60))
    head = tok.tokenize("System: " + rules, True, True)[:576]  # nine whole pages
    a = head + tok.tokenize("\nQuestion: where is the lighthouse?\nAnswer:", False, True)
    b = head + tok.tokenize("\nQuestion: what is bread made of?\nAnswer:", False, True)
    assert 576 < len(a) < 700 and a[:576] == b[:576]
    return a, b


def closed(eng):
    """Drops an engine: its disk writer finishes the queued pages first."""
    del eng
    gc.collect()


def test_a_new_engine_reads_the_prefix_from_disk_with_a_cold_prefills_tokens(model, tmp_path):
    path, tok = model
    a, b = prompts(tok)
    cold = engine(path)
    want = {name: [run(cold, 1, ids), run(cold, 2, ids, **SEEDED)] for name, ids in (("a", a), ("b", b))}
    closed(cold)

    first = engine(path, tmp_path)
    assert run(first, 1, a)[0] == want["a"][0][0]
    st = first.prompt_cache_stats()
    assert st["disk_max_bytes"] > 0
    closed(first)
    assert len(list(tmp_path.glob("*.lskv"))) >= len(a) // PAGE  # every whole page of the prompt

    for name, ids in (("a", a), ("b", b)):
        second = engine(path, tmp_path)  # a restart: nothing in RAM
        greedy, seeded = run(second, 1, ids), run(second, 2, ids, **SEEDED)
        assert greedy[0] == want[name][0][0] and seeded[0] == want[name][1][0]
        assert greedy[1]["completion_tokens"] == want[name][0][1]["completion_tokens"]
        assert greedy[1]["cached_tokens"] >= 9 * PAGE  # prefilled from the pages on disk
        st = second.prompt_cache_stats()
        assert st["disk_reads"] >= 9
        closed(second)


def test_a_changed_model_file_never_reads_old_pages(model, tmp_path):
    path, tok = model
    a, _ = prompts(tok)
    first = engine(path, tmp_path)
    run(first, 1, a)
    closed(first)
    copy = tmp_path / "copy.gguf"  # the same bytes under another identity (path, inode, mtime)
    shutil.copyfile(path, copy)
    other = engine(str(copy), tmp_path)
    text, stats = run(other, 1, a)
    assert stats["cached_tokens"] == 0 and other.prompt_cache_stats()["disk_reads"] == 0
    closed(other)


def test_a_slot_file_carries_a_prefill_to_another_engine(model, tmp_path):
    path, tok = model
    a, b = prompts(tok)
    cold = engine(path)
    want = run(cold, 1, b)
    closed(cold)
    saver_dir, restorer_dir = tmp_path / "saver", tmp_path / "restorer"
    saver_dir.mkdir()
    restorer_dir.mkdir()
    saver = engine(path, saver_dir)
    run(saver, 1, a)
    n_saved, n_written = saver.save_slot(0, "conv.bin")
    assert n_saved >= len(a) and n_written > 9 * 1024
    with pytest.raises(ValueError, match="plain file name"):
        saver.save_slot(0, "../conv.bin")
    with pytest.raises(ValueError, match="does not exist"):
        saver.save_slot(2, "conv.bin")
    closed(saver)
    shutil.copyfile(saver_dir / "conv.bin", restorer_dir / "conv.bin")  # only the slot file, no page files
    restorer = engine(path, restorer_dir)
    assert restorer.restore_slot(1, "conv.bin") == (n_saved, n_written)
    text, stats = run(restorer, 1, b)
    assert text == want[0] and stats["cached_tokens"] >= 9 * PAGE
    assert restorer.erase_slot(1) == n_saved
    with pytest.raises(RuntimeError, match="no such file"):
        restorer.restore_slot(0, "absent.bin")
    (restorer_dir / "bad.bin").write_bytes((restorer_dir / "conv.bin").read_bytes()[:-5])
    with pytest.raises(RuntimeError, match="restore"):
        restorer.restore_slot(0, "bad.bin")
    closed(restorer)


def test_slot_files_need_a_prefix_cache_dir(model):
    path, _ = model
    eng = engine(path)
    with pytest.raises(ValueError, match="prefix cache dir"):
        eng.save_slot(0, "x.bin")
