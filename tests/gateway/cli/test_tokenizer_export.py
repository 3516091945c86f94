"""`laneserve tokenizer export`: the `tokenizers` library, loading the exported tokenizer.json,
produces exactly our ids on every golden tokenization entry of both real models."""
import json
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

import lanes  # noqa: E402
import lanes._runtime as rt  # noqa: E402
from gateway.cli.main import main  # noqa: E402
from gateway.cli.tokenizer_export import export_tokenizer, spm_merges  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
MODELS = {"smollm2": "smollm2-135m-instruct-q4_1", "gemma3": "gemma3-270m-q4_k_m"}
PATHS = {"smollm2": lanes.smollm2_path, "gemma3": lanes.gemma3_path}


def _golden(model: str) -> list[dict]:
    with open(GOLDEN / MODELS[model] / "dev" / "tokenize.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request, tmp_path_factory):
    model = request.param
    out = tmp_path_factory.mktemp(model)
    assert main(["tokenizer", "export", model, str(out)]) == 0
    return model, out


def _hf_ids(hf, text: str, add_special: bool, parse_special: bool) -> list[int]:
    hf.encode_special_tokens = not parse_special
    return hf.encode(text, add_special_tokens=add_special).ids


def test_golden_ids_identical(exported):
    model, out = exported
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    ours = rt.Tokenizer(PATHS[model]())
    entries = _golden(model)
    mismatches = []
    for e in entries:
        expected = ours.encode(e["text"], e["add_special"], e["parse_special"])
        assert expected == e["ids"]  # our tokenizer is the reference here
        got = _hf_ids(hf, e["text"], e["add_special"], e["parse_special"])
        if got != expected:
            mismatches.append((e["category"], e["text"][:40], got[:12], expected[:12]))
    assert not mismatches, f"{len(mismatches)}/{len(entries)} differ: {mismatches[:5]}"


def test_special_token_handling(exported):
    """Both special-token modes on text around the chat markers, and the decode round trip."""
    model, out = exported
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    ours = rt.Tokenizer(PATHS[model]())
    marker = "<|im_start|>" if model == "smollm2" else "<start_of_turn>"
    text = f"{marker}user\nHi there  12345 ünïcödé 日本語 🙂{marker}"
    for add_special, parse_special in ((False, False), (True, True), (False, True), (True, False)):
        assert _hf_ids(hf, text, add_special, parse_special) == ours.encode(text, add_special, parse_special)
    ids = ours.encode(text, False, True)
    assert hf.decode(ids, skip_special_tokens=False) == ours.decode(ids, True).decode()


def test_config_file(exported):
    model, out = exported
    config = json.loads((out / "tokenizer_config.json").read_text())
    ours = rt.Tokenizer(PATHS[model]())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == ours.piece(ours.eos_id, True).decode()
    assert config["add_bos_token"] == ours.add_bos
    assert isinstance(config["model_max_length"], int) and config["model_max_length"] > 0
    if model == "smollm2":
        assert "<|im_start|>" in config["chat_template"]


def test_spm_merges_follow_scores():
    texts = ["a", "b", "c", "ab", "bc", "abc"]
    scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0]
    assert spm_merges(texts, scores) == [["b", "c"], ["a", "b"], ["a", "bc"], ["ab", "c"]]


def test_cli_rejects_unknown_model(tmp_path, capsys):
    assert main(["tokenizer", "export", str(tmp_path / "nope.gguf"), str(tmp_path)]) == 2
    assert "nope.gguf" in capsys.readouterr().err
    assert export_tokenizer is not None


def test_transformers_loads_it_offline(exported, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, out = exported
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    ours = rt.Tokenizer(PATHS[model]())
    for e in _golden(model):
        if e["parse_special"]:  # transformers always parses special tokens
            assert tok(e["text"], add_special_tokens=e["add_special"])["input_ids"] == e["ids"]
    assert tok.eos_token == ours.piece(ours.eos_id, True).decode()
