"""StopMatcher: hold back possible stop prefixes, never emit a stop string, earliest stop wins."""
from hypothesis import given, settings
from hypothesis import strategies as st

import lanes._runtime as rt


def run(stops, pieces):
    m = rt.StopMatcher(stops)
    out = [m.push(p) for p in pieces]
    if not m.stopped:
        out.append(m.flush())
    return out, m.stopped


def reference(text, stops):
    """Text cut at the first stop occurrence: the one ending first (ties: starting first)."""
    best = None
    for s in stops:
        if not s:
            continue
        pos = text.find(s)
        if pos >= 0:
            key = (pos + len(s), pos)
            best = key if best is None or key < best else best
    return (text, False) if best is None else (text[: best[1]], True)


def test_stop_split_across_many_pushes():
    out, stopped = run(["<|end|>"], ["Hello ", "wor", "ld<", "|", "en", "d", "|>", "after"])
    assert stopped
    assert "".join(out) == "Hello world"
    assert out[:3] == ["Hello ", "wor", "ld"]  # "<" is held back until resolved
    assert all("<" not in o for o in out)


def test_partial_prefix_released_when_not_a_stop():
    m = rt.StopMatcher(["STOP"])
    assert m.push("a ST") == "a "
    assert m.push("O") == ""
    assert m.push("P!") == "" and m.stopped
    m = rt.StopMatcher(["STOP"])
    assert m.push("a ST") == "a "
    assert m.push("OX") == "STOX"
    assert not m.stopped


def test_hold_back_restarts_inside_the_held_text():
    # "abab" held as a prefix of "ababc"; a following "abc" means the match starts at offset 2
    m = rt.StopMatcher(["ababc"])
    assert m.push("xabab") == "x"
    assert m.push("abc") == "ab"
    assert m.stopped


def test_multiple_stops_earliest_wins():
    out, stopped = run(["World", "lo"], ["Hello World"])
    assert stopped and out == ["Hel"]
    out, stopped = run(["\n\n", "User:"], ["Sure.", " User:", " hi\n\n"])
    assert stopped and "".join(out) == "Sure. "


def test_overlapping_stops_earliest_end_wins_independently_of_splits():
    # "b" completes before "abc" can: same answer whether the text comes whole or in pieces
    for pieces in (["abc"], ["a", "b", "c"], ["ab", "c"]):
        out, stopped = run(["abc", "b"], pieces)
        assert stopped and "".join(out) == "a"


def test_flush_releases_held_text():
    m = rt.StopMatcher(["</answer>"])
    assert m.push("42 </ans") == "42 "
    assert m.flush() == "</ans"
    assert not m.stopped


def test_after_stop_everything_is_swallowed():
    m = rt.StopMatcher(["x"])
    assert m.push("abxcd") == "ab"
    assert m.push("more") == ""
    assert m.flush() == ""


def test_no_stops_passes_text_through_and_empty_stops_are_ignored():
    m = rt.StopMatcher(["", ""])
    assert m.push("abc") == "abc"
    assert m.flush() == ""


def test_reset_reuses_the_matcher():
    m = rt.StopMatcher(["zz"])
    m.push("azz")
    assert m.stopped
    m.reset(["q"])
    assert not m.stopped
    assert m.push("zz") == "zz"


def test_utf8_stops_and_text():
    out, stopped = run(["終わり", "ß"], ["日本", "語の終", "わ", "り です"])
    assert stopped and "".join(out) == "日本語の"
    out, stopped = run(["éé"], ["aé", "bé", "é"])
    assert stopped and "".join(out) == "aéb"


@st.composite
def text_stops_splits(draw, alphabet):
    text = draw(st.text(alphabet=alphabet, max_size=60))
    stops = draw(st.lists(st.text(alphabet=alphabet, min_size=0, max_size=5), min_size=0, max_size=4))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces, prev = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[prev:c])
        prev = c
    return text, stops, pieces


@settings(max_examples=600, deadline=None)
@given(text_stops_splits("abc"))
def test_property_output_is_text_cut_at_first_stop(case):
    text, stops, pieces = case
    out, stopped = run(stops, pieces)
    want, want_stopped = reference(text, stops)
    assert "".join(out) == want
    assert stopped == want_stopped


@settings(max_examples=300, deadline=None)
@given(text_stops_splits("aé日\n "))
def test_property_holds_for_multibyte_text(case):
    text, stops, pieces = case
    out, stopped = run(stops, pieces)
    assert ("".join(out), stopped) == reference(text, stops)


@settings(max_examples=300, deadline=None)
@given(text_stops_splits("ab"))
def test_property_never_emits_beyond_what_is_safe(case):
    # Every prefix of the output stream is a prefix of the final answer: nothing emitted early
    # is ever "taken back", and nothing from a stop string leaks before the stop is detected.
    text, stops, pieces = case
    m = rt.StopMatcher(stops)
    want, _ = reference(text, stops)
    emitted = ""
    for p in pieces:
        emitted += m.push(p)
        assert want.startswith(emitted)
