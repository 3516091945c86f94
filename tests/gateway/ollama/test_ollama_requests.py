"""Ollama option parsing: Ollama's own defaults where they differ from ours, GenerationParams' elsewhere."""
import pytest

from gateway.ollama.requests import DEFAULT_OPTIONS, parse_chat, parse_generate
from lanes.api import GenerationParams

BODY = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}


def test_default_options_are_ollamas():
    assert DEFAULT_OPTIONS == {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
                               "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def test_omitted_options_take_the_defaults():
    for req in (parse_chat(BODY), parse_generate({"model": "smollm2", "prompt": "Hi"})):
        p = req.params
        assert (p.temperature, p.top_k, p.top_p, p.repetition_penalty) == (0.8, 40, 0.9, 1.1)
        assert (p.min_p, p.repeat_last_n, p.presence_penalty, p.frequency_penalty) == (0.0, 64, 0.0, 0.0)
        assert p.seed is None and p.stop == () and p.min_tokens == GenerationParams(max_tokens=1).min_tokens
        assert req.num_predict is None and req.stream is True


@pytest.mark.parametrize("num_predict, expected", [(5, 5), (0, None), (-1, None), (-2, None), (-5, None)])
def test_num_predict_limits_only_when_positive_as_ollamas_runner(num_predict, expected):
    assert parse_generate({"model": "smollm2", "prompt": "Hi", "options": {"num_predict": num_predict}}).num_predict \
        == expected


def test_null_stream_means_the_default():
    assert parse_chat({**BODY, "stream": None}).stream is True
    assert parse_generate({"model": "smollm2", "prompt": "Hi", "stream": None}).stream is True


def test_options_override_the_defaults():
    p = parse_chat({**BODY, "options": {"temperature": 0, "top_k": 5, "repeat_last_n": -1, "min_p": 0.1,
                                        "repeat_penalty": 0, "seed": 3, "stop": ["x", ""]}}).params
    assert (p.temperature, p.top_k, p.repeat_last_n, p.min_p) == (0.0, 5, 1 << 20, 0.1)
    assert p.repetition_penalty == 1.0 and p.seed == 3 and p.stop == ("x",)


def test_keep_alive_durations_and_seconds():
    from gateway.ollama.keep_alive import KeepAliveError, parse_keep_alive

    assert parse_keep_alive(None) is None
    assert parse_keep_alive("5m") == 300.0
    assert parse_keep_alive("1h30m") == 5400.0
    assert parse_keep_alive("1.5s") == 1.5 and parse_keep_alive("500ms") == 0.5
    assert parse_keep_alive("0") == 0.0 and parse_keep_alive(0) == 0.0 and parse_keep_alive("0s") == 0.0
    assert parse_keep_alive("-1") == -1.0 and parse_keep_alive("-1m") == -60.0 and parse_keep_alive(-1) == -1.0
    assert parse_keep_alive(300) == 300.0 and parse_keep_alive("300") == 300.0
    for bad in ("5 minutes", "m", "1h-30m", "", True, [], float("inf")):
        with pytest.raises(KeepAliveError):
            parse_keep_alive(bad)
