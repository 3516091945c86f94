"""Field validation of completions and chat bodies: strict by default, every error names `param`."""
import pytest

from gateway.http.errors import APIError
from gateway.openai.requests import COMPLETIONS_DEFAULT_MAX_TOKENS, parse_chat, parse_completion

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"model": "smollm2", "prompt": "Once"}


def chat(**extra):
    return parse_chat({**CHAT, **extra}, lenient=False)


def completion(**extra):
    return parse_completion({**COMPLETION, **extra}, lenient=False)


def rejects(fn, param, status=400, **extra):
    with pytest.raises(APIError) as info:
        fn(**extra)
    assert info.value.status == status
    assert info.value.param == param, info.value.message
    return info.value


def test_minimal_chat_defaults():
    req = chat()
    s = req.sampling
    assert s.model == "smollm2" and s.max_tokens is None and s.n == 1 and not s.stream
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (1.0, 1.0, 0, 0.0, None)
    assert req.messages == ({"role": "user", "content": "Hi"},)


def test_sampling_fields_are_generation_params_fields_with_their_defaults():
    import dataclasses

    from lanes.api import GenerationParams

    params = {f.name: f for f in dataclasses.fields(GenerationParams)}
    s = chat().sampling
    own = {"model", "max_tokens", "n", "stream", "include_usage", "grammar_param"}
    for f in dataclasses.fields(s):
        if f.name not in own:
            assert f.type == params[f.name].type and f.default == params[f.name].default, f.name
            assert getattr(s, f.name) == params[f.name].default, f.name
    assert {f.name for f in dataclasses.fields(s)} - own >= {"temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                                           "presence_penalty", "frequency_penalty",
                                                           "repetition_penalty", "logit_bias", "ignore_eos",
                                                           "min_tokens", "grammar", "logprobs"}


def test_completions_default_max_tokens_is_openai_legacy_16():
    assert completion().sampling.max_tokens == COMPLETIONS_DEFAULT_MAX_TOKENS == 16


def test_all_sampling_fields_are_read():
    s = chat(max_tokens=5, temperature=0, top_p=0.5, top_k=40, min_p=0.05, seed=7, n=2, stop=["\n", "END"],
             presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.1, logit_bias={"42": -100, "7": 5},
             ignore_eos=True, min_tokens=3, stream=True, stream_options={"include_usage": True}, user="u1").sampling
    assert s.max_tokens == 5 and s.temperature == 0.0 and s.top_k == 40 and s.seed == 7 and s.n == 2
    assert s.stop == ("\n", "END") and s.logit_bias == ((7, 5.0), (42, -100.0))
    assert s.ignore_eos and s.min_tokens == 3 and s.stream and s.include_usage


def test_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=100, max_completion_tokens=7).sampling.max_tokens == 7
    assert chat(max_tokens=100).sampling.max_tokens == 100


def test_explicit_nulls_mean_defaults():
    s = chat(temperature=None, stop=None, seed=None, stream_options=None, logit_bias=None).sampling
    assert s.temperature == 1.0 and s.stop == () and s.seed is None


def test_unknown_field_is_400_naming_it():
    error = rejects(chat, "frobnicate", frobnicate=1)
    assert error.code == "unknown_parameter"


def test_lenient_ignores_unknown_fields_and_reports_them():
    req = parse_chat({**CHAT, "frobnicate": 1, "zeta": 2}, lenient=True)
    assert req.ignored_fields == ("frobnicate", "zeta")


@pytest.mark.parametrize("field, value", [
    ("stream", "true"), ("stream", 1), ("max_tokens", True), ("max_tokens", 1.5), ("max_tokens", "16"),
    ("max_tokens", 1e30), ("n", False), ("temperature", "0.5"), ("temperature", True), ("seed", 1.0),
    ("top_k", True), ("ignore_eos", 0), ("stop", 5), ("stop", [1]), ("logit_bias", [1]), ("user", 5),
    ("stream_options", "yes"), ("min_tokens", False),
])
def test_wrong_types_are_400(field, value):
    rejects(chat, field, **{field: value})


@pytest.mark.parametrize("field, value", [
    ("max_tokens", 0), ("max_tokens", -1), ("temperature", -0.1), ("temperature", 2.5), ("top_p", 1.5),
    ("min_p", -1), ("n", 0), ("presence_penalty", 3), ("frequency_penalty", -2.5), ("repetition_penalty", 0),
    ("seed", -2), ("seed", 1 << 64), ("stop", ["a", "b", "c", "d", "e"]), ("stop", [""]), ("stop", "x" * 300),
    ("logit_bias", {"abc": 1}), ("logit_bias", {"1": 1000}), ("logit_bias", {"-1": 1}),
    ("logit_bias", {str(i): 1 for i in range(2000)}),
])
def test_out_of_range_values_are_400(field, value):
    rejects(chat, field, **{field: value})


def test_min_tokens_above_max_tokens_is_400():
    rejects(chat, "min_tokens", max_tokens=2, min_tokens=3)


def test_seed_minus_one_means_random():
    assert chat(seed=-1).sampling.seed is None


def test_top_k_minus_one_means_off():
    assert chat(top_k=-1).sampling.top_k == 0


def test_stream_options_need_stream():
    rejects(chat, "stream_options", stream_options={"include_usage": True})
    rejects(chat, "stream_options", stream=True, stream_options={"include_usage": True, "bogus": 1})


@pytest.mark.parametrize("field, value", [
    ("continuous_usage_stats", True),
])
def test_known_but_unsupported_values_are_400_never_dropped(field, value):
    error = rejects(chat, "stream_options", stream=True, stream_options={field: value})
    assert error.code == "unsupported_parameter"


@pytest.mark.parametrize("field, value, param", [
    ("tools", [{"type": "function"}], "tools[0].function"), ("tool_choice", "required", "tool_choice"),
    ("response_format", {"type": "yaml"}, "response_format.type"),
])
def test_malformed_tools_and_formats_are_400(field, value, param):
    rejects(chat, param, **{field: value})


@pytest.mark.parametrize("field, value", [
    ("logprobs", False), ("top_logprobs", 0), ("tools", []), ("tool_choice", "none"),
    ("response_format", {"type": "text"}), ("parallel_tool_calls", True),
])
def test_no_op_values_of_unsupported_fields_are_accepted(field, value):
    chat(**{field: value})


@pytest.mark.parametrize("fields", [
    {"store": False}, {"metadata": {"k": "v"}}, {"service_tier": "auto"}, {"service_tier": "default"},
    {"safety_identifier": "u1"}, {"prompt_cache_key": "p"},
])
def test_fields_of_hosted_features_are_accepted_with_no_op_values(fields):
    chat(**fields)
    completion(**fields)


@pytest.mark.parametrize("field, value", [("store", True), ("service_tier", "priority"), ("metadata", "x")])
def test_hosted_features_we_do_not_serve_are_400(field, value):
    rejects(chat, field, **{field: value})


def test_a_returned_assistant_message_is_accepted_as_history():
    """What the openai client's message.model_dump() gives back (the fields it sends as null)."""
    returned = {"role": "assistant", "content": "Hello", "refusal": None, "annotations": [], "audio": None,
                "function_call": None, "tool_calls": None, "parsed": None}
    req = chat(messages=[CHAT["messages"][0], returned, {"role": "user", "content": "again"}])
    assert req.messages[1] == {"role": "assistant", "content": "Hello"}


@pytest.mark.parametrize("field, value", [("function_call", {"name": "f", "arguments": "{}"}), ("audio", {"id": "a"})])
def test_null_only_message_fields_refuse_a_value(field, value):
    messages = [{"role": "assistant", "content": "x", field: value}, {"role": "user", "content": "y"}]
    error = rejects(chat, f"messages[0].{field}", messages=messages)
    assert error.code == "unsupported_parameter"


def test_completion_only_fields():
    assert completion(echo=True).echo
    rejects(completion, "best_of", best_of=3)
    completion(echo=False, best_of=1, suffix=None)
    rejects(completion, "max_completion_tokens", max_completion_tokens=3)  # a chat-only field


@pytest.mark.parametrize("prompt, expected", [
    ("hi", ("hi",)),
    (["a", "b"], ("a", "b")),
    ([1, 2, 3], ((1, 2, 3),)),
    ([[1, 2], [3]], ((1, 2), (3,))),
])
def test_prompt_forms(prompt, expected):
    assert completion(prompt=prompt).prompts == expected


@pytest.mark.parametrize("prompt", [None, 5, [], ["a", 1], [1, "a"], [[1, "x"]], [-1], [True], [[1.5]],
                                    ["x"] * 100])
def test_bad_prompts_are_400(prompt):
    body = {**COMPLETION, "prompt": prompt}
    with pytest.raises(APIError) as info:
        parse_completion(body, lenient=False)
    assert info.value.status == 400 and info.value.param == "prompt"


def test_missing_model_is_400():
    with pytest.raises(APIError) as info:
        parse_chat({"messages": CHAT["messages"]}, lenient=False)
    assert info.value.param == "model" and info.value.code == "missing_required_parameter"


@pytest.mark.parametrize("messages, param", [
    ([], "messages"),
    ("hi", "messages"),
    ([1], "messages[0]"),
    ([{"role": "wizard", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}],
     "messages[0].content"),
    ([{"role": "user", "content": "x", "extra": 1}], "messages[0]"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}], "messages[0].tool_calls[0]"),
])
def test_bad_messages_are_400(messages, param):
    with pytest.raises(APIError) as info:
        parse_chat({**CHAT, "messages": messages}, lenient=False)
    assert info.value.status == 400 and info.value.param == param


def test_messages_are_normalised():
    req = chat(messages=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": None, "reasoning_content": "hidden"},
    ])
    assert req.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"},
                            {"role": "assistant", "content": ""})


def test_enable_thinking_goes_to_the_template():
    assert chat(enable_thinking=False).template_kwargs == {"enable_thinking": False}
    rejects(chat, "enable_thinking", enable_thinking=True, chat_template_kwargs={"enable_thinking": False})


def test_error_messages_do_not_echo_hostile_names():
    error = rejects(chat, "<str>", **{"\x1b[31mevil\r\nline": 1})
    assert "evil" not in error.message


def test_tools_must_be_an_array_or_null():
    """A falsy non-array (0, "", false, {}) used to pass as "no tools"; the OpenAPI document says
    array or null, and schemathesis' negative data holds the parser to it."""
    from gateway.http.errors import APIError
    from gateway.ollama.requests import parse_chat as ollama_chat

    for value in (0, "", False, {}):
        rejects(chat, "tools", tools=value)
        with pytest.raises(APIError):  # answered as {"error": ...} by the Ollama routes
            ollama_chat({"model": "m", "messages": [], "tools": value})
    assert chat(tools=[]).tools is None and chat(tools=None).tools is None
