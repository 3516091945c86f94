"""Synthetic prompts: exactly the asked number of tokens by the model's own tokenizer, seeded,
and different from their first token on."""
import pytest

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_prompts_have_the_exact_token_length_and_round_trip(model):
    from gateway.cli.bench.prompts import PromptMaker, make_prompts, model_file

    try:
        maker = PromptMaker(model_file(model))
    except (FileNotFoundError, ImportError) as exc:
        pytest.skip(str(exc))
    for num_tokens in (1, 7, 128, 300):
        prompts = make_prompts(maker, 5, num_tokens, seed=3)
        for p in prompts:
            assert len(p["ids"]) == num_tokens
            assert list(maker.tokenizer.encode(p["text"], False, False)) == p["ids"]
        if num_tokens > 1:
            assert len({p["ids"][0] for p in prompts}) == 5  # no shared prefix for a cache to reuse
    assert make_prompts(maker, 2, 32, seed=3) == make_prompts(maker, 2, 32, seed=3)
    assert make_prompts(maker, 2, 32, seed=3) != make_prompts(maker, 2, 32, seed=4)
