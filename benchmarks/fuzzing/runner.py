"""Child process of benchmarks/fuzz.py: libFuzzer (atheris) on one target until -max_total_time.

Usage: python -m benchmarks.fuzzing.runner TARGET CORPUS_DIR SEED_DIR [libFuzzer flags...]
libFuzzer exits the process when done (or on a finding), so the parent reads its stderr for the
figures. Python coverage comes from atheris' bytecode instrumentation of every module loaded
imported by the target (ours, jinja2, sanic's form parser); native code is not
instrumented for coverage (gcc has no -fsanitize=fuzzer) — it is checked by ASan/UBSan instead.
"""
from __future__ import annotations

import sys

import atheris

from benchmarks.fuzzing.registry import target_named


INSTRUMENTED = ["gateway", "lanes", "jinja2", "markupsafe", "sanic"]


def main() -> None:
    name, *libfuzzer_args = sys.argv[1:]
    target = target_named(name)
    # Modules imported from here on are instrumented (the targets import what they use lazily):
    # our packages and the pure-Python parsers they hand input to. Instrumenting everything
    # loaded (atheris.instrument_all) takes minutes for numpy & co. and adds nothing we own.
    with atheris.instrument_imports(include=INSTRUMENTED):
        state = target.setup()
        for seed in target.seeds():  # one input: the lazy imports happen inside this block
            target.one_input(state, seed)
            break

    def one(data: bytes) -> None:
        target.one_input(state, data)

    atheris.Setup([sys.argv[0], *libfuzzer_args], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
