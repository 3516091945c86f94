"""Fuzz targets for laneserve's parsers (benchmarks/fuzz.py runs one with atheris / libFuzzer).

Each target module exposes TARGETS: name → Target(setup, one_input, seeds). `setup()` loads what
the target needs once (a tokenizer, a matcher factory) and returns it; `one_input(state, data)`
runs one input and raises only on a bug (the documented refusals — ValueError with a message —
are caught inside); `seeds()` yields seed inputs built from the repository's real files and tests.
"""
