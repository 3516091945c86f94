"""ReasoningSplitter (csrc/engine/reasoning_splitter.h): markers split out as text streams in, never
a partial marker in either channel, whatever the token boundaries; in harmony mode (gpt-oss) the
analysis channel is reasoning, the other channels content, and headers, <|end|>, <|start|>assistant
reach neither."""
import re

from hypothesis import given, settings
from hypothesis import strategies as st

import lanes._runtime as rt

OPEN, CLOSE = "<think>", "</think>"


def run(pieces, starts_inside=False, open_marker=OPEN, close_marker=CLOSE, **harmony):
    s = rt.ReasoningSplitter(open_marker, close_marker, starts_inside, **harmony)
    content, reasoning = [], []
    for p in pieces:
        c, r = s.push(p)
        content.append(c)
        reasoning.append(r)
    c, r = s.flush()
    return "".join(content) + c, "".join(reasoning) + r, content, reasoning


def cut_anywhere(text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


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
    pieces = cut_anywhere(text, data)
    content, reasoning, _, _ = run(pieces, starts_inside)
    assert (content, reasoning) == reference(text, starts_inside)


def harmony(as_content=False):
    """run()'s keywords for a harmony splitter (no open/close markers)."""
    return {"open_marker": "", "close_marker": "", "harmony": True, "as_content": as_content}


ANSWER = ["<|channel|>", "analysis", "<|message|>", "User", " asks", " 6", "*", "7", ".", "<|end|>",
          "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "It", " is", " 42", "."]
HARMONY_MARKER = re.compile(r"<\|(channel|message|end|start|constrain)\|>")


def harmony_reference(text, as_content=False):
    """Whole-text split: a header runs from <|channel|> to <|message|>; the body after an "analysis"
    header is reasoning, after any other header content; <|end|> / <|start|> drop text until the next
    header; text before any marker is content."""
    content, reasoning = [], []
    state, header, target = "body", "", content
    pos = 0
    for m in list(HARMONY_MARKER.finditer(text)) + [None]:
        part = text[pos:m.start() if m else len(text)]
        if state == "header":
            header += part
        elif state == "body":
            target.append(part)
        if m is None:
            return "".join(content), "".join(reasoning)
        pos, name = m.end(), m.group(1)
        if name == "channel":
            state, header = "header", ""
        elif name == "message":
            if state == "header":
                target = reasoning if header == "analysis" and not as_content else content
            state = "body"
        elif name == "constrain":
            header += "<constrain>"
        else:
            state, target = "between", content


def test_harmony_analysis_then_final_one_token_at_a_time():
    content, reasoning, per_content, per_reasoning = run(ANSWER, **harmony())
    assert (content, reasoning) == ("It is 42.", "User asks 6*7.")
    assert all("<|" not in c and "assistant" not in c for c in per_content)
    assert all("<|" not in r for r in per_reasoning)


def test_harmony_markers_split_inside_and_across_pieces():
    text = "".join(ANSWER)
    for size in (1, 2, 3, 5, 7):
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        assert run(pieces, **harmony())[:2] == ("It is 42.", "User asks 6*7."), size


def test_harmony_straight_to_final_is_all_content():
    assert run(["<|channel|>", "final", "<|message|>", "Hi", " there"], **harmony())[:2] == ("Hi there", "")
    assert run(["plain", " text"], **harmony())[:2] == ("plain text", "")


def test_harmony_several_analysis_blocks_and_commentary():
    text = ("<|channel|>analysis<|message|>a1<|end|><|start|>assistant<|channel|>commentary<|message|>c<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>a2<|end|>"
            "<|start|>assistant<|channel|>final <|constrain|>json<|message|>{}")
    assert run([text], **harmony())[:2] == ("c{}", "a1a2")


def test_harmony_thinking_off_keeps_analysis_as_content():
    assert run(ANSWER, **harmony(True))[:2] == ("User asks 6*7.It is 42.", "")


def test_harmony_cut_off_header_and_partial_marker_at_the_end():
    assert run(["<|channel|>analysis<|message|>why", "<|e"], **harmony())[:2] == ("", "why<|e")
    assert run(["<|channel|>anal"], **harmony())[:2] == ("", "")
    assert run(["a <| b", " <|chan"], **harmony())[:2] == ("a <| b <|chan", "")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>",
                                 "analysis", "final", "assistant", "<|", "|>", "<", "a", " ", "é", "json"]),
                max_size=24),
       st.data(), st.booleans())
def test_harmony_any_token_boundaries_give_the_whole_text_split(parts, data, as_content):
    text = "".join(parts)
    pieces = cut_anywhere(text, data)
    assert run(pieces, **harmony(as_content))[:2] == harmony_reference(text, as_content)
