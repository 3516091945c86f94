"""The text of the lanes' synthetic backend (a `NAME=synthetic:…` model, csrc/lane/synthetic_backend.cpp):
what tests and benchmarks expect of its streams."""


def synthetic_token(i: int) -> str:
    """Token i of a sequence: "<i> ", every 7th with characters that need JSON escaping."""
    return f"{i}" + ('"\\\n\u2028é ' if i % 7 == 6 else " ")


def synthetic_text(num_tokens: int) -> str:
    """The first `num_tokens` tokens of a sequence, concatenated."""
    return "".join(synthetic_token(i) for i in range(num_tokens))
