"""Every golden dev tokenize entry (llama.cpp 0c1e57098): identical ids, pieces and detok."""
import pytest

from tok_helpers import MODELS, as_golden_piece, golden_entries, tokenizer_for


CASES = [
    pytest.param(model, i, id=f"{model.split('-')[0]}-{i:02d}-{e['category']}")
    for model in MODELS
    for i, e in enumerate(golden_entries(model))
]


@pytest.mark.parametrize("model,index", CASES)
def test_golden_entry(model, index):
    e = _entries(model)[index]
    tok = tokenizer_for(model)
    ids = tok.encode(e["text"], add_special=e["add_special"], parse_special=e["parse_special"])
    assert ids == e["ids"]
    assert [as_golden_piece(tok.piece(i, special=True)) for i in ids] == e["pieces"]
    detok = tok.decode(ids, special=True)
    assert as_golden_piece(detok) == e["detok"]
    assert detok == b"".join(tok.piece(i, special=True) for i in ids)


_memo: dict[str, list] = {}


def _entries(model):
    if model not in _memo:
        _memo[model] = golden_entries(model)
    return _memo[model]


@pytest.mark.parametrize("model", list(MODELS))
def test_golden_set_is_complete(model):
    entries = _entries(model)
    assert len(entries) == 73
    flags = {(e["add_special"], e["parse_special"]) for e in entries}
    assert flags == {(False, False), (True, True), (False, True)}


@pytest.mark.parametrize("model", list(MODELS))
def test_dropped_text_index_is_rebuilt_by_concurrent_first_encodes(model):
    """A lane's tokenizer drops its text → id index after loading (keep_text_index=False); the
    first encodes, from several threads at once (encode releases the GIL), rebuild it once and
    give the golden ids."""
    from concurrent.futures import ThreadPoolExecutor

    import lanes._runtime as rt
    from tok_helpers import MODELS as PATHS

    entries = _entries(model)
    tok = rt.Tokenizer(PATHS[model](), keep_text_index=False)

    def encode(e):
        return tok.encode(e["text"], add_special=e["add_special"], parse_special=e["parse_special"])

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(encode, entries)) == [e["ids"] for e in entries]
