"""ReasoningSplitter (csrc/engine/reasoning_splitter.h): markers split out as text streams in, never
a partial marker in either channel, whatever the token boundaries; in harmony mode (gpt-oss) the
analysis channel is reasoning, the other channels content, and headers, <|end|>, <|start|>assistant
reach neither."""
import re

import pytest

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


def harmony(as_content=False, calls=False):
    """run()'s keywords for a harmony splitter (no open/close markers)."""
    return {"open_marker": "", "close_marker": "", "harmony": True, "as_content": as_content, "calls": calls}


ANSWER = ["<|channel|>", "analysis", "<|message|>", "User", " asks", " 6", "*", "7", ".", "<|end|>",
          "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "It", " is", " 42", "."]
HARMONY_MARKER = re.compile(r"<\|(channel|message|end|start|constrain)\|>")
SPACE = " \n\r\t"
MAX_HEADER_BYTES = 160
CALL_OPEN, CALL_CLOSE = "<|channel|>commentary to=", "<|call|>"


def _role_text(text: str) -> int:
    """Text right after the prompt's <|start|>assistant: 1 role text (" to=…"), -1 not, 0 undecided."""
    text = text.strip(SPACE)
    return -1 if not "to=".startswith(text[:3]) else (1 if len(text) >= 3 else 0)


def _recipient(header: bytes) -> bytes:
    for m in re.finditer(rb"(?:^|(?<=[ \n\r\t]))to=([^ \n\r\t]*)", header):
        return m.group(1)
    return b""


def harmony_reference(text, as_content=False, calls=False):
    """Whole-text split: a message's header is its role text (after <|start|>, or before the first
    marker when it starts with "to=") and channel header (<|channel|> to <|message|>, after a space;
    a second one replaces the first), its first 160 bytes kept; the body after an "analysis" header without a
    recipient is reasoning, after any other content. calls: a body to functions.NAME is content as
    CALL_OPEN NAME <|message|> body, closed by CALL_CLOSE when another message begins; a body to any
    other recipient goes nowhere. Text before any marker that is no role text is content."""
    content, reasoning = [], []
    st_ = {"state": "start", "header": b"", "channel_at": None, "long": False, "target": content, "call": False}

    def end_message():
        if st_["call"]:
            content.append(CALL_CLOSE)
        st_.update(call=False, target=content, header=b"", channel_at=None, long=False)

    def add_header(part: bytes):
        room = MAX_HEADER_BYTES - len(st_["header"])
        st_["header"] += part[:room]
        st_["long"] = st_["long"] or len(part) > room

    def begin_message():
        header, long_ = st_["header"], st_["long"]
        to = b"" if long_ else _recipient(header)
        st_.update(state="body", target=content)
        if to and calls:
            if to.startswith(b"functions.") and len(to) > len(b"functions."):
                content.append(CALL_OPEN + to.decode() + "<|message|>")
                st_["call"] = True
            else:
                st_["state"] = "hidden"
            return
        channel = header[st_["channel_at"]:].strip(SPACE.encode()) if st_["channel_at"] is not None else b""
        if not as_content and not long_ and not to and channel == b"analysis":
            st_["target"] = reasoning

    first = HARMONY_MARKER.search(text)
    head = text[:first.start()] if first else text
    role = _role_text(head)
    if role < 0 or (role == 0 and first is None):
        content.append(head)
        st_["state"] = "body"
    else:
        st_["state"] = "between"
        add_header(head.encode())
    markers = list(HARMONY_MARKER.finditer(text))
    for i, m in enumerate(markers):
        name = m.group(1)
        if name == "channel":
            if st_["state"] in ("body", "hidden"):
                end_message()
            if st_["channel_at"] is not None:
                st_.update(header=st_["header"][:st_["channel_at"]], long=False)
            st_["state"] = "header"
            add_header(b" ")
            st_["channel_at"] = len(st_["header"])
        elif name == "message":
            if st_["state"] not in ("body", "hidden"):
                begin_message()
        elif name == "constrain":
            if st_["state"] in ("header", "between"):
                add_header(b" <|constrain|>")
        else:
            end_message()
            st_["state"] = "between"
        part = text[m.end():markers[i + 1].start() if i + 1 < len(markers) else len(text)]
        if st_["state"] in ("header", "between"):
            add_header(part.encode())
        elif st_["state"] == "body":
            st_["target"].append(part)
    return "".join(content), "".join(reasoning)


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


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>",
                                 "analysis", "final", "assistant", "commentary", "<|", "|>", "<", "a", " ", "é",
                                 "json", " to=functions.f", "to=", "t", "functions.", "to=python", '{"x":1}']),
                max_size=24),
       st.data(), st.booleans(), st.booleans())
def test_harmony_any_token_boundaries_give_the_whole_text_split(parts, data, as_content, calls):
    text = "".join(parts)
    pieces = cut_anywhere(text, data)
    assert run(pieces, **harmony(as_content, calls))[:2] == harmony_reference(text, as_content, calls)


CALL = '<|channel|>commentary to=functions.get_weather<|message|>{"city":"Paris"}'


@pytest.mark.parametrize("header", [
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",   # recipient in the channel
    " to=functions.get_weather<|channel|>commentary json<|message|>",               # in the role text
    " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>",
    "<|channel|>analysis to=functions.get_weather<|message|>",
    "<|channel|>commentary to=assistant<|channel|>commentary to=functions.get_weather<|message|>"])
def test_harmony_call_reaches_content_in_one_form_at_every_boundary(header):
    text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant" + header + '{"city":"Paris"}'
    for cut in range(len(text) + 1):
        assert run([text[:cut], text[cut:]], **harmony(calls=True))[:2] == (CALL, "Need weather."), cut
    assert run([text], **harmony(calls=False))[:2] == ('{"city":"Paris"}', "Need weather.")


def test_harmony_several_calls_preamble_and_other_recipients():
    text = ("<|channel|>commentary<|message|>Checking.<|end|>"
            "<|start|>assistant to=functions.a<|channel|>commentary json<|message|>{}<|end|>"
            "<|start|>assistant<|channel|>commentary to=python<|message|>print(1)<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{\"k\":2}")
    content, reasoning = run([text], **harmony(calls=True))[:2]
    assert reasoning == "" and content == ("Checking." + "<|channel|>commentary to=functions.a<|message|>{}<|call|>"
                                           + '<|channel|>commentary to=functions.b<|message|>{"k":2}')
    assert run([text], **harmony(True, calls=True))[:2] == (content, "")
