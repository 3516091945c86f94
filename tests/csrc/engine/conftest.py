"""Helpers shared by the engine tests (imported as `from .conftest import ...`)."""


def run_alone(eng, rid, ids, max_tokens, **sampling):
    """One request alone on `eng` to its end: (text bytes, its final stats)."""
    eng.add(rid, 0, ids, max_tokens, **sampling)
    text, stats = b"", None
    for _ in range(10_000):
        if not eng.has_work():
            break
        for _rid, _c, t, finished, _reason, st in eng.step():
            text += t
            if finished:
                stats = st
    return text, stats
