"""ReasoningSplitter (csrc/engine/reasoning_splitter.h): markers split out as text streams in, never
a partial marker in either channel, whatever the token boundaries."""
import re

from hypothesis import given, settings
from hypothesis import strategies as st

import lanes._runtime as rt

OPEN, CLOSE = "<think>", "</think>"


def run(pieces, starts_inside=False, open_marker=OPEN, close_marker=CLOSE):
    s = rt.ReasoningSplitter(open_marker, close_marker, starts_inside)
    content, reasoning = [], []
    for p in pieces:
        c, r = s.push(p)
        content.append(c)
        reasoning.append(r)
    c, r = s.flush()
    return "".join(content) + c, "".join(reasoning) + r, content, reasoning


def reference(text, starts_inside=False):
    """Whole-text split: alternate blocks at the markers; whitespace right after a marker dropped."""
    content, reasoning, inside, skip = [], [], starts_inside, starts_inside
    pos = 0
    while True:
        marker = CLOSE if inside else OPEN
        at = text.find(marker, pos)
        part = text[pos:] if at < 0 else text[pos:at]
        if skip:
            stripped = re.sub(r"^[ \n\r\t]+", "", part)
            if stripped:
                skip = False
            part = stripped
        (reasoning if inside else content).append(part)
        if at < 0:
            return "".join(content), "".join(reasoning)
        pos = at + len(marker)
        inside = not inside
        skip = True


def test_qwen3_output_split_across_tokens():
    pieces = ["<th", "ink>", "\n", "Hmm", ", think", "ing\n", "</", "think", ">\n\n", "The answer", "."]
    content, reasoning, per_content, per_reasoning = run(pieces)
    assert (content, reasoning) == ("The answer.", "Hmm, thinking\n")
    assert all("<" not in c for c in per_content) and all("<" not in r for r in per_reasoning)


def test_starts_inside_block_opened_by_the_prompt():
    assert run(["\nplan", "</think>", "\n\nanswer"], starts_inside=True)[:2] == ("answer", "plan")


def test_no_markers_is_all_content_and_partial_marker_released_at_end():
    assert run(["a < b", " <thi"])[:2] == ("a < b <thi", "")
    assert run(["<think>cut", " off </thi"])[:2] == ("", "cut off </thi")


def test_several_blocks_and_other_markers():
    assert run(["x<think>a</think>y<think>b</think>z"])[:2] == ("xyz", "ab")
    assert run(["[R]r[/R]c"], open_marker="[R]", close_marker="[/R]")[:2] == ("c", "r")


def test_whitespace_only_dropped_right_after_a_marker():
    assert run(["<think>", " ", "\n", " a b ", "</think>", "\n", "\n", " c d "])[:2] == ("c d ", "a b ")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<", "<th", "ink>", "</", "think>", "<think>", "</think>", "a", " ", "\n",
                                 "é", "t", ">", "hi "]), max_size=24),
       st.data(), st.booleans())
def test_any_token_boundaries_give_the_whole_text_split(parts, data, starts_inside):
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    content, reasoning, _, _ = run(pieces, starts_inside)
    assert (content, reasoning) == reference(text, starts_inside)
