"""The log renderer keeps any value on its own line (CWE-117): one log call → one line of JSON
that parses back to the same value, whatever control or line-break characters it holds."""
from __future__ import annotations

import json

import pytest

from gateway.server.logs import configure_logging, get_logger

# Every C0 control (CR, LF, NUL, ESC, the \x1c-\x1e separators str.splitlines breaks at), DEL, C1
# NEL, and the Unicode line/paragraph separators (line breaks for JavaScript and splitlines).
HOSTILE = ["".join(map(chr, range(0x20))), "\x7f", "\x85", "\u2028", "\u2029",
           'x\r\n{"forged": 1}\x1b[31m', "\ud800"]


@pytest.fixture
def restore_logging():
    yield
    configure_logging("info")


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_on_one_line(capsys, restore_logging, value):
    configure_logging("debug")  # binds to the sys.stderr pytest installs for this test's call
    get_logger().info("probe", model=value, fields=[value], headers={value: value})
    lines = capsys.readouterr().err.splitlines()  # splitlines also breaks at \x1c-\x1e, NEL, U+2028/9
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["model"] == value and entry["fields"] == [value] and entry["headers"] == {value: value}
    assert all(" " <= ch <= "~" for ch in lines[0])  # plain printable ASCII: no ANSI, no breaks


class _Tty:
    """A terminal-like stream for the auto format."""

    def __init__(self):
        self.parts: list[str] = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_auto_format_is_json_when_not_a_terminal(capsys, restore_logging):
    configure_logging("info", "auto")  # pytest's captured stderr is not a terminal
    get_logger().info("probe", model="m")
    assert json.loads(capsys.readouterr().err)["model"] == "m"


def test_auto_format_is_coloured_console_on_a_terminal(monkeypatch, restore_logging):
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    configure_logging("info", "auto")
    get_logger().info("probe", model="m\r\nforged")
    out = "".join(tty.parts)
    assert "probe" in out and "\x1b[" in out  # ANSI colours
    assert out.count("\n") == 1 and "'m\\r\\nforged'" in out  # values escaped by repr()
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_console_and_json_forced(monkeypatch, capsys, restore_logging):
    configure_logging("info", "console")
    get_logger().info("probe", n=1)
    err = capsys.readouterr().err
    assert "probe" in err and "n=1" in err and "\x1b[" not in err  # no colours off a terminal
    monkeypatch.setattr("sys.stderr", _Tty())
    configure_logging("info", "json")
    get_logger().info("probe", n=2)
    assert json.loads("".join(__import__("sys").stderr.parts))["n"] == 2
