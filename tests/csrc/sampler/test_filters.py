"""top_k / top_p / min_p never pick an excluded id (hypothesis property tests).

The allowed set is computed independently in float64 from the definition: rank by
(logit desc, id asc); top_k keeps the first k; top_p keeps the shortest prefix of that
(renormalized) set whose temperature-1 mass reaches p; min_p keeps p >= min_p * p_max.
A 1e-5 slack absorbs float32-vs-float64 rounding exactly at a top_p boundary.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lanes._runtime as rt

SLACK = 1e-5


def allowed(logits, top_k, top_p, min_p):
    l = logits.astype(np.float64)
    ids = np.arange(len(l))
    order = [int(i) for i in np.lexsort((ids, -l)) if np.isfinite(l[i])]  # logit desc, id asc
    if 0 < top_k < len(l):
        order = order[:top_k]
    if top_p < 1.0:
        vals = l[order]
        p = np.exp(vals - vals.max())
        cum = np.cumsum(p / p.sum())
        # widest legal prefix: the first index whose mass reaches top_p even with rounding slack
        reach = np.nonzero(cum >= top_p + SLACK)[0]
        if len(reach):
            order = order[: int(reach[0]) + 1]
    m = l[order[0]]
    if min_p > 0:
        keep = np.exp(l[order] - m) >= min_p * (1 - SLACK)
        order = [i for i, k in zip(order, keep) if k]
    return set(order)


logit_arrays = st.integers(2, 300).flatmap(
    lambda n: st.lists(
        # a coarse grid makes ties common; a few huge/small values stress the windows
        st.one_of(st.integers(-8, 8).map(float), st.sampled_from([-1e4, -40.0, 30.0, float("-inf")])),
        min_size=n, max_size=n,
    )
).filter(lambda xs: any(np.isfinite(x) for x in xs))


@settings(max_examples=300, deadline=None)
@given(
    logits=logit_arrays,
    top_k=st.integers(0, 40),
    top_p=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
    min_p=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    temperature=st.sampled_from([0.3, 1.0, 2.5]),
    seed=st.integers(0, 2**64 - 1),
)
def test_filters_never_pick_excluded_ids(logits, top_k, top_p, min_p, temperature, seed):
    x = np.array(logits, dtype=np.float32)
    ok = allowed(x, top_k, top_p, min_p)
    s = rt.Sampler(len(x))
    s.reset({"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}, [], [])
    for _ in range(20):
        tok = s.sample(x, 0)
        assert tok in ok, (tok, sorted(ok))


@pytest.mark.parametrize("path", ["native", "portable"])
def test_filters_at_gemma_vocab(path):
    # 262k vocab with an LLM-like shape: a flat bulk and a small head. Exercises the window
    # widening and the lazy chunked sort on the real size.
    rt._sampler_force_portable(path == "portable")
    try:
        n = 262144
        rng = np.random.default_rng(7)
        x = (rng.standard_normal(n) * 2).astype(np.float32)
        x[rng.choice(n, 64, replace=False)] += rng.uniform(6, 14, 64).astype(np.float32)
        for params in (
            {"top_p": 0.95},
            {"top_p": 0.5},
            {"top_k": 40, "top_p": 0.95, "min_p": 0.05},
            {"top_k": 1000},
            {"min_p": 0.1},
            {"top_p": 0.999},
        ):
            ok = allowed(x, params.get("top_k", 0), params.get("top_p", 1.0), params.get("min_p", 0.0))
            s = rt.Sampler(n)
            s.reset({"temperature": 0.8, "seed": 5, **params}, [], [])
            picks = {s.sample(x, 0) for _ in range(50)}
            assert picks <= ok, params
    finally:
        rt._sampler_force_portable(False)


def test_top_p_on_flat_distribution_keeps_most_of_the_vocab():
    # Uniform logits: top_p 0.5 must keep exactly half (the lowest ids on the tie) and nothing else.
    n = 4096
    s = rt.Sampler(n)
    s.reset({"temperature": 1.0, "top_p": 0.5, "seed": 1}, [], [])
    picks = [s.sample(np.zeros(n, dtype=np.float32), 0) for _ in range(3000)]
    assert max(picks) < n // 2 + 1
    assert len(set(picks)) > 1000  # and it really samples across that half


@pytest.mark.parametrize("path", ["native", "portable"])
def test_histogram_path_on_flat_gemma_vocab(path):
    # Flat logits: the kept sets are ~10^5 tokens, resolved by the O(n) histogram selection
    # (every bucket above the boundary whole, the boundary bucket sorted exactly).
    rt._sampler_force_portable(path == "portable")
    try:
        n = 262144
        rng = np.random.default_rng(11)
        x = (rng.standard_normal(n) * 0.5).astype(np.float32)
        x[rng.choice(n, 1000, replace=False)] = -np.inf
        for params in ({"top_p": 0.95}, {"top_p": 0.3, "min_p": 0.3}, {"top_k": 20000}, {"top_k": 9000, "top_p": 0.5}):
            ok = allowed(x, params.get("top_k", 0), params.get("top_p", 1.0), params.get("min_p", 0.0))
            s = rt.Sampler(n)
            s.reset({"temperature": 1.0, "seed": 9, **params}, [], [])
            picks = [s.sample(x, 0) for _ in range(300)]
            assert set(picks) <= ok, params
            assert len(set(picks)) > 200  # spread over the large kept set
        # the boundary is exact: top_k = 20000 keeps exactly the 20000 best (lowest id on ties)
        assert len(allowed(x, 20000, 1.0, 0.0)) == 20000
    finally:
        rt._sampler_force_portable(False)
