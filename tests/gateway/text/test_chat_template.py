"""Chat templates in the jinja2 sandbox: SmolLM2's ChatML as llama-server renders it, our Gemma 3
template, template-raised errors as 400s, and sandbox escapes refused."""
import pytest

from gateway.text.chat_template import GEMMA3_TEMPLATE, ChatTemplate, template_source
from gateway.http.errors import APIError

# SmolLM2's template, verbatim from its GGUF (tokenizer.chat_template).
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_smollm2_renders_like_llama_server():
    rendered = ChatTemplate(SMOLLM2).render([{"role": "user", "content": "Hi"}])
    assert rendered == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_smollm2_multi_turn_with_system():
    rendered = ChatTemplate(SMOLLM2).render([
        {"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}])
    assert rendered == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
                        "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n")


def test_gemma3_template_matches_runtime_notes():
    rendered = ChatTemplate(GEMMA3_TEMPLATE).render([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}])
    assert rendered == ("<start_of_turn>user\nBe brief.\n\nWhat is the capital of France?<end_of_turn>\n"
                        "<start_of_turn>model\n")


def test_gemma3_maps_assistant_to_model_and_trims():
    rendered = ChatTemplate(GEMMA3_TEMPLATE).render([
        {"role": "user", "content": "  Hi  "}, {"role": "assistant", "content": "Hello\n"},
        {"role": "user", "content": "Bye"}])
    assert rendered == ("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
                        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


def test_gemma3_rejects_non_alternating_roles_as_400():
    with pytest.raises(APIError) as info:
        ChatTemplate(GEMMA3_TEMPLATE).render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert info.value.status == 400 and "alternate" in info.value.message


def test_template_source_prefers_the_file_then_builtin():
    assert template_source("X", "gemma3") == "X"
    assert template_source(None, "gemma3") == GEMMA3_TEMPLATE
    assert template_source(None, "llama") is None


def test_bos_and_kwargs_are_available():
    template = ChatTemplate("{{ bos_token }}{% if enable_thinking %}T{% endif %}{{ messages[0].content }}",
                            bos_token="<s>")
    assert template.render([{"role": "user", "content": "x"}], {"enable_thinking": True}) == "<s>Tx"


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.append(1) }}",
    "{{ cycler.__init__.__globals__.os }}",
])
def test_sandbox_blocks_escapes(source):
    with pytest.raises(APIError):
        ChatTemplate(source).render([{"role": "user", "content": "x"}])


def test_tojson_keeps_unicode():
    assert ChatTemplate("{{ messages[0].content | tojson }}").render([{"role": "user", "content": "é"}]) == '"é"'


# Found by benchmarks/fuzz.py chat_template (tests/data/fuzz/chat_template): a template from a
# hostile model file recursed into RecursionError (a 500), or looped / multiplied without bound
# (the event loop stuck for hours). Each is now the caller's 400, within a fraction of a second.
@pytest.mark.parametrize("source", [
    "{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{% set s = 'ab' * 400000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "{% for a in messages[0]['content'] %}{% for b in messages[0]['content'] %}{% for c in messages[0]['content']"
    " %}{% endfor %}{% endfor %}{% endfor %}",
    "{{ 'x' * 10 ** 9 }}",
    "{{ [1] * 999999999 }}",
    "{{ 7 ** 99999999 }}",
    # a macro calling itself twice per level (2^60 calls) and a recursive loop fanning out:
    # both draw from the render's loop budget
    "{% macro d(n) %}{% if n %}{{ d(n-1) }}{{ d(n-1) }}{% endif %}{% endmacro %}{{ d(60) }}",
    "{% for x in range(10) recursive %}{{ loop(range(10)) }}{% endfor %}",
])
def test_hostile_templates_end_as_400_quickly(source):
    import time

    t = ChatTemplate(source)
    start = time.monotonic()
    with pytest.raises(APIError) as info:
        t.render([{"role": "user", "content": "y" * 2000}])
    assert info.value.status == 400
    assert time.monotonic() - start < 2.0


def test_loop_budget_is_per_render_and_real_loops_fit():
    t = ChatTemplate("{% for m in messages %}{% for c in m['content'] %}{{ c }}{% endfor %}{% endfor %}"
                     "{{ range(3) | list | length }}")
    messages = [{"role": "user", "content": "z" * 100_000}]
    for _ in range(5):  # one render's budget never carries over to the next
        assert t.render(messages) == "z" * 100_000 + "3"


def test_a_template_nested_too_deeply_to_parse_is_a_syntax_error():
    # Found by benchmarks/fuzz.py chat_template (tests/data/fuzz/chat_template/crash-bf7cc121…):
    # jinja's parser recursed into RecursionError, which loading a model file did not expect.
    import jinja2

    with pytest.raises(jinja2.TemplateSyntaxError):
        ChatTemplate("{{ " + "[" * 2000 + " }}")


@pytest.mark.parametrize("source", ["{{ 5 // 0 }}", "{{ range(10**30) }}", "{{ 1e300 ** 2 }}", "{{ 1e400 }}",
                                    "{{ 'x'.encode('no-such-codec') }}", "{{ (1e300 * 1e300)|int }}"])
def test_template_arithmetic_and_lookup_errors_are_a_400(source):
    with pytest.raises(APIError) as info:
        ChatTemplate(source).render([{"role": "user", "content": "x"}])
    assert info.value.status == 400
