"""--cache-ram-mib through the server and the openai client: with more conversations than slots,
a conversation's next turn reports the prefix it kept as usage.prompt_tokens_details.cached_tokens,
and answers as it would without the cache."""
from __future__ import annotations

PERSONAS = ["a ship's navigator", "a baker in Lyon", "a retired astronomer"]
RULES = "Speak plainly, never use lists and keep every answer to one sentence. " * 8


def _turns(client, cache_seed: int) -> list:
    """Three conversations on two slots, then the first one's second turn: its usage."""
    histories = [[{"role": "system", "content": f"You are {p}. {RULES}"},
                  {"role": "user", "content": "Where are you?"}] for p in PERSONAS]
    first_usage = []
    for history in histories:
        r = client.chat.completions.create(model="smollm2", messages=history, max_tokens=8, temperature=0)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
        first_usage.append(r.usage)
    history = histories[0] + [{"role": "user", "content": "And why?"}]
    r = client.chat.completions.create(model="smollm2", messages=history, max_tokens=12, temperature=0.8,
                                       seed=cache_seed)
    return first_usage, r


def _run(own_server, cache_mib: str):
    from openai import OpenAI

    srv = own_server("--parallel", "2", "--cache-ram-mib", cache_mib)
    srv.wait_ready()
    with OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=60.0) as client:
        return _turns(client, cache_seed=77)


def test_a_displaced_conversation_keeps_its_prefill(own_server):
    first_usage, second = _run(own_server, "64")
    assert second.usage.prompt_tokens > first_usage[0].prompt_tokens > 120
    assert second.usage.prompt_tokens_details.cached_tokens >= first_usage[0].prompt_tokens, second.usage
    first_off, second_off = _run(own_server, "0")
    assert second_off.usage.prompt_tokens_details.cached_tokens < 16  # the template's opening at most
    assert second_off.choices[0].message.content == second.choices[0].message.content  # same tokens, seeded
