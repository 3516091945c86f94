"""Hand-written pre-tokenizer matchers agree with the regexes they implement.

The reference regexes use \\p{L}, \\p{N} and \\s; Python's `re` has no \\p{..}, so the classes are
expanded here from unicodedata (letters L*, numbers N*, White_Space), the same definitions the
generated C++ table uses. Contractions are written out ('[sS]' ...) so that `re` does not apply
Unicode case folding (it would match U+017F for 's'), which the reference does not do.
"""
import re
import unicodedata

import lanes._runtime as rt
from hypothesis import given, settings
from hypothesis import strategies as st

WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]


def _class(pred) -> str:
    parts, start = [], None
    for cp in range(0x110001):
        ok = cp < 0x110000 and pred(cp)
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            a, b = re.escape(chr(start)), re.escape(chr(cp - 1))
            parts.append(a if start == cp - 1 else f"{a}-{b}")
            start = None
    return "".join(parts)


L = _class(lambda cp: unicodedata.category(chr(cp))[0] == "L")
N = _class(lambda cp: unicodedata.category(chr(cp))[0] == "N")
S = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in WHITE_SPACE)

GPT2 = rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])"
_CONTR = r"'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
LLAMA3 = (rf"{_CONTR}|[^\r\n{L}{N}]?[{L}]+|[{N}]{{1,3}}| ?[^{S}{L}{N}]+[\r\n]*|[{S}]*[\r\n]+"
          rf"|[{S}]+(?![^{S}])|[{S}]+")
QWEN2 = LLAMA3.replace(f"[{N}]{{1,3}}", f"[{N}]")
# gpt-4o as llama.cpp runs it (its std::regex rewrite: letters split by ASCII case only).
_U, _W = rf"(?:(?=[{L}])[^a-z])", rf"(?:(?=[{L}])[^A-Z])"
GPT4O = (rf"[^\r\n{L}{N}]?{_U}*{_W}+(?:{_CONTR})?|[^\r\n{L}{N}]?{_U}+{_W}*(?:{_CONTR})?|[{N}]{{1,3}}"
         rf"| ?[^{S}{L}{N}]+[\r\n/]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+")
PATTERNS = {
    "gpt2": [re.compile(GPT2)],
    "smollm": [re.compile(f"[{N}]"), re.compile(GPT2)],
    "llama-bpe": [re.compile(LLAMA3)],
    "qwen2": [re.compile(QWEN2)],
    "gpt-4o": [re.compile(GPT4O)],
}


def reference_split(pre: str, text: str) -> list[bytes]:
    pieces = [text] if text else []
    for rx in PATTERNS[pre]:
        out = []
        for p in pieces:
            pos = 0
            for m in rx.finditer(p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return [p.encode("utf-8") for p in pieces]


ALPHABET = list("aZq'sStTrReEvVmMlLdD 019_.,!?-\t\n\r\x0b\x1c") + [
    "é", "日", "Ω", "ß", "²", "٣", "Ⅷ", "½", "\u00a0", "\u3000", "\u2028", "\x85", "\u200b", "€", "😀", "\u036b",
    "ſ", "K",
]
TEXT = st.text(alphabet=st.sampled_from(ALPHABET) | st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_matchers_agree_with_regexes(text):
    for pre in PATTERNS:
        assert rt._pretokenize(pre, text) == reference_split(pre, text), pre


def test_known_splits():
    assert rt._pretokenize("smollm", "abc 123 x45") == [b"abc", b" ", b"1", b"2", b"3", b" x", b"4", b"5"]
    assert rt._pretokenize("smollm", "don't I'll") == [b"don", b"'t", b" I", b"'ll"]
    assert rt._pretokenize("smollm", "city\t\t\tend") == [b"city", b"\t\t", b"\t", b"end"]
    assert rt._pretokenize("llama-bpe", "I'LL 12345\n\n x") == [b"I", b"'LL", b" ", b"123", b"45", b"\n\n", b" x"]
    assert rt._pretokenize("qwen2", "ab 12") == [b"ab", b" ", b"1", b"2"]
    g = lambda s: [p.decode() for p in rt._pretokenize("gpt-4o", s)]  # noqa: E731
    assert g("HelloWorld HTTPServer I'LL don't 12345 a/b\n\n x") == [
        "Hello", "World", " HTTPServer", " I'LL", " don't", " ", "123", "45", " a", "/b", "\n\n", " x"]
    assert g("ÉtéÉTÉ Straße") == ["ÉtéÉ", "TÉ", " Straße"]  # a non-ASCII letter is both "upper" and "lower"


def test_invalid_utf8_becomes_replacement_character():
    # the reference decodes invalid bytes to U+FFFD before splitting
    assert rt._pretokenize("gpt2", b"a\xffb") == [b"a", "\ufffd".encode(), b"b"]
