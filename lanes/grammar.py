"""Grammar support in this process: loads llguidance's shared library into the native runtime.

The runtime calls llguidance's C API (csrc/grammar/) from the lane's token loop with the GIL
released. The library ships inside the `llguidance` wheel as its Python extension module; that
module is a plain shared library exporting the C API too, so the runtime opens it with dlopen —
it needs the Python runtime in the process, which lanes (Python processes) have.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os

from lanes import _runtime

_version: str | None = None


def library_path() -> str | None:
    """Path of the llguidance library, or None when the package is not installed.

    Found without importing the `llguidance` package (its Python modules would cost every lane
    ~4 MB of memory it never uses): the spec of a top-level package is looked up, not executed."""
    spec = importlib.util.find_spec("llguidance")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_lib" + suffix)
            if os.path.isfile(path):
                return path
    return None


def defer() -> bool:
    """Like load(), but the library is mapped by the first constrained request (lanes: most never
    constrain, and each mapping costs a process ~0.5 MB). False when llguidance is not installed."""
    path = library_path()
    if path is None:
        return False
    _runtime.defer_llguidance(path)
    return True


def load() -> str | None:
    """Makes grammar-constrained decoding available here (idempotent); returns llguidance's
    version, or None when it is not installed (constrained requests then fail with a clear error)."""
    global _version
    if _version is None:
        path = library_path()
        if path is None:
            return None
        _version = _runtime.load_llguidance(path)
    return _version
