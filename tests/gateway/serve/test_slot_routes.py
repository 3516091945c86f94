"""gateway/serve/slot_routes.py's error mapping, model-free (the routes through a real server:
test_prefix_disk.py)."""
from __future__ import annotations

import orjson

from gateway.serve.slot_routes import _slot_error, plain_filename
from lanes.slot_files import SlotFileError


def test_a_lane_that_is_down_is_503_with_retry_after():
    r = _slot_error(SlotFileError("the lane of slot 0 is not running (restarting?)", "unavailable"), 2)
    assert r.status == 503 and r.headers["Retry-After"] == "2"
    assert orjson.loads(r.body)["error"] == {"code": 503, "message": "the lane of slot 0 is not running (restarting?)",
                                             "type": "unavailable_error"}


def test_bad_requests_are_400_and_failures_500():
    assert _slot_error(SlotFileError("no such file", "bad_request"), 1).status == 400
    failed = _slot_error(SlotFileError("disk full", "failed"), 1)
    assert failed.status == 500 and "Retry-After" not in failed.headers


def test_plain_filename():
    assert plain_filename("conv.bin") == "conv.bin"
    for bad in ("../x", "a/b", "", "..", ".", "a\0b", "a\\b", "\ud800", 7, "x" * 256):
        assert plain_filename(bad) is None, bad
