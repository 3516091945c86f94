"""The window page group's bookkeeping without a model (csrc/engine/window_pages.h, prefix_tree.h):
builds the standalone window_pages_check.cpp (tests/csrc/model/native_build.py) and runs it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from native_build import build_checker, run_checker  # noqa: E402


def test_window_page_bookkeeping():
    out = run_checker(build_checker(Path(__file__).with_name("window_pages_check.cpp")))
    assert out.count("ok ") == 14 and "FAIL" not in out, out
