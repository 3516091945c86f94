"""The prefix cache's disk tier alone (csrc/engine/disk_tier.h, over bytes, no model): page files
written by one tier are read by a new one (a restart) and by another running one (lanes sharing the
directory), a corrupt, truncated or stale file (another
model or K/V layout) or one holding another prefix is ignored and removed, and the files stay within
their budget, least recently used out first."""
import os
import time

import pytest

from lanes import _runtime

PAGE_BYTES = 4096
IDENTITY = "model=/models/a.gguf;dev=1;ino=2;size=3;mtime_ns=4;kv=f16;page_positions=64;n_layer=2;kv_dim=8"


def ids(n, start=0):
    return list(range(start, start + n))


def page(seed):
    return bytes((seed * 31 + i * 7) % 251 for i in range(PAGE_BYTES))


def tier(d, identity=IDENTITY, max_bytes=1 << 30):
    return _runtime.PrefixDiskTier(str(d), identity, PAGE_BYTES, max_bytes, 4096)


def files(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".lskv"))


def written(d, prefix=ids(64), identity=IDENTITY):
    t = tier(d, identity)
    assert t.put(prefix, page(1))
    t.flush()
    (name,) = files(d)
    return os.path.join(d, name)


def test_a_page_survives_a_new_tier(tmp_path):
    t = tier(tmp_path)
    assert t.put(ids(64), page(1)) and t.put(ids(128), page(2))
    assert not t.put(ids(64), page(1))  # already there
    t.flush()
    assert t.stats()["writes"] == 2 and len(files(tmp_path)) == 2
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]
    again = tier(tmp_path)
    assert again.contains(ids(128)) and again.stats()["files"] == 2
    assert again.get(ids(128)) == page(2) and again.get(ids(64)) == page(1)
    assert again.get(ids(64, start=1)) is None  # another prefix: never written
    assert again.stats()["reads"] == 2


def test_lanes_sharing_the_dir_read_each_others_new_pages(tmp_path):
    reader = tier(tmp_path)  # started before the page existed
    assert not reader.contains(ids(64))
    writer = tier(tmp_path)
    assert writer.put(ids(64), page(3))
    writer.flush()
    assert reader.contains(ids(64)) and reader.get(ids(64)) == page(3)
    assert reader.stats()["reads"] == 1 and reader.stats()["files"] == 1
    assert not reader.put(ids(64), page(3))  # known now: not written twice
    assert reader.get(ids(64, start=5)) is None


@pytest.mark.parametrize("damage", ["flip_data_byte", "flip_id", "truncate", "append"])
def test_a_damaged_file_is_ignored_and_removed(tmp_path, damage):
    path = written(tmp_path)
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        if damage == "flip_data_byte":
            f.seek(size - 100)
            b = f.read(1)
            f.seek(size - 100)
            f.write(bytes([b[0] ^ 0x40]))
        elif damage == "flip_id":
            f.seek(size - PAGE_BYTES - 4)  # the last id of the prefix
            f.write((999).to_bytes(4, "little"))
        elif damage == "truncate":
            f.truncate(size - 17)
        else:
            f.seek(0, 2)
            f.write(b"x")
    t = tier(tmp_path)
    assert t.get(ids(64)) is None
    assert files(tmp_path) == []


@pytest.mark.parametrize("old, new", [("mtime_ns=4", "mtime_ns=5"), ("ino=2", "ino=9"), ("n_layer=2", "n_layer=3"),
                                      ("kv_dim=8", "kv_dim=16")])
def test_a_stale_file_of_another_model_or_layout_is_never_read(tmp_path, old, new):
    """Another identity names other files; its bytes renamed into this identity's name are removed."""
    stale_identity = IDENTITY.replace(old, new)
    assert stale_identity != IDENTITY
    stale = written(tmp_path, identity=stale_identity)
    t = tier(tmp_path)
    assert not t.contains(ids(64)) and t.get(ids(64)) is None  # its own name is another identity's
    assert t.put(ids(64), page(3))
    t.flush()
    ours = [os.path.join(tmp_path, p) for p in files(tmp_path) if os.path.join(tmp_path, p) != stale]
    assert len(ours) == 1
    os.replace(stale, ours[0])  # the stale bytes under our name
    assert tier(tmp_path).get(ids(64)) is None
    assert not os.path.exists(ours[0])


def test_files_stay_within_the_budget_least_recently_used_out(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    one = os.path.getsize(written(probe))  # one page's file (64 ids)
    d = tmp_path / "budget"
    d.mkdir()
    prefixes = [ids(64, start=1000 * k) for k in range(4)]  # same size, other prefixes
    t = tier(d, max_bytes=3 * one)
    assert t.stats()["max_bytes"] == 3 * one
    for k in range(3):
        assert t.put(prefixes[k], page(k))
        t.flush()
    assert t.get(prefixes[0]) == page(0)  # the oldest written, now the most recently used
    assert t.put(prefixes[3], page(3))
    t.flush()
    st = t.stats()
    assert st["files"] == 3 and st["bytes_used"] == 3 * one and st["evictions"] == 1
    assert not t.contains(prefixes[1])  # the least recently used went
    for k in (0, 2, 3):
        time.sleep(0.02)  # file times tick with the kernel's coarse clock (~4 ms): reads this close could tie
        assert t.get(prefixes[k]) == page(k)
    # A smaller budget at the next start removes the oldest files at once (reads set mtimes: 3 is newest).
    small = tier(d, max_bytes=one)
    assert small.stats()["files"] == 1 and len(files(d)) == 1
    assert small.get(prefixes[3]) == page(3)


def test_a_missing_or_unwritable_dir_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="does not exist"):
        tier(tmp_path / "absent")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        with pytest.raises(RuntimeError, match="not writable"):
            tier(ro)
    finally:
        ro.chmod(0o700)
