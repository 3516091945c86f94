"""Build for laneserve: Python packages `gateway`, `lanes` and two native extensions.

`lanes._runtime` is the inference runtime (everything under csrc/ except the ring-only module);
`lanes._ring` is the small shared-memory ring extension the gateway imports.
Portable flags only (no -march=native): ISA-specific kernels select their instruction set per
function with target attributes and are chosen at run time after a self-test.
"""
import glob
import os

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_packages, setup

HEADERS = glob.glob("csrc/**/*.h", recursive=True)


def needs_recompile(obj: str, src: str) -> bool:
    """Recompile when the source or ANY header is newer than the object (a stale object built
    against an older header silently corrupts memory; header dependencies are not tracked)."""
    if not os.path.exists(obj):
        return True
    obj_mtime = os.stat(obj).st_mtime
    return any(os.stat(p).st_mtime >= obj_mtime for p in [src, *HEADERS])


# The build machine has 2 cores; never run more than 2 compile jobs.
ParallelCompile("LANESERVE_BUILD_JOBS", default=2, max=2, needs_recompile=needs_recompile).install()

CXX_FLAGS = ["-O3", "-fno-math-errno", "-Wall", "-Wno-unused-function", "-pthread"]
LINK_FLAGS = ["-pthread"]

# Sanitizer builds (docs/sanitizers.md): LANESERVE_SANITIZE=address,undefined or =thread.
# -O1 keeps the sanitized tests fast enough while leaving stack traces accurate; no-recover
# makes UBSan abort like ASan does (a report is a failure, never a log line); frame pointers
# give the sanitizers' unwinder full stacks through the SIMD kernels.
SANITIZE = os.environ.get("LANESERVE_SANITIZE", "").strip()
if SANITIZE:
    sanitize_flag = f"-fsanitize={SANITIZE}"
    CXX_FLAGS = [f for f in CXX_FLAGS if not f.startswith("-O")] + [
        "-O1",
        "-g1",  # line tables: enough for symbolized sanitizer stacks, far faster to build than -g
        "-fno-omit-frame-pointer",
        sanitize_flag,
        f"-fno-sanitize-recover={SANITIZE}",
    ]
    LINK_FLAGS = LINK_FLAGS + [sanitize_flag]

RING_MODULE = "csrc/bindings/ring_module.cpp"


def sources(pattern):
    return sorted(glob.glob(pattern, recursive=True))


ring_sources = sources("csrc/ring/**/*.cpp") + [RING_MODULE]
runtime_sources = [s for s in sources("csrc/**/*.cpp") if s != RING_MODULE]


def extension(name, srcs):
    return Pybind11Extension(
        name,
        srcs,
        include_dirs=["csrc"],
        depends=HEADERS,  # otherwise a header-only change skips the whole extension
        cxx_std=17,
        extra_compile_args=CXX_FLAGS,
        extra_link_args=LINK_FLAGS,
        libraries=["rt"],
    )


ext_modules = [extension("lanes._runtime", runtime_sources), extension("lanes._ring", ring_sources)]

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="laneserve",
    version="0.1.0",
    description="Local high-throughput LLM server: Sanic gateway, shared-memory lanes, own C++ GGUF runtime",
    long_description=long_description,
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["gateway", "gateway.*", "lanes", "lanes.*"]),
    package_data={"gateway.ui": ["static/*"]},  # the web chat page (GET /ui)
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    install_requires=[
        "sanic>=25.3",
        "numpy>=1.26",
        "posix-ipc>=1.1",
        "structlog>=24.1",
        "prometheus-client>=0.20",
        "jinja2>=3.1",
        "orjson>=3.9",
        "llguidance>=1.9",  # grammar-constrained decoding (structured outputs, tool calls)
        "pillow>=10.0",  # images in chat: decoding and mtmd-exact resizing (gateway/vision/)
    ],
    extras_require={
        # `laneserve bench`: the PNG plot and the progress bar
        "bench": ["matplotlib>=3.7", "tqdm>=4.66"],
        "test": [
            "pytest>=8",
            "tokenizers>=0.20",
            "pexpect>=4.8",
            "transformers>=4.40",
            "pytest-asyncio>=0.23",
            "httpx>=0.27",
            "openai>=1.40",
            "ollama>=0.3",
            "anthropic>=0.40",
            "gguf>=0.10",
            "hypothesis>=6.100",
            "jsonschema>=4.20",
            "openapi-spec-validator>=0.7",
            "schemathesis>=4.0",
            "pyyaml>=6",  # tests/deploy parse the Kubernetes manifests
            "selenium>=4.20",  # tests/gateway/ui drive the distribution's chromium + chromedriver
            "atheris>=2.3",  # tests/fuzz and benchmarks/fuzz.py (libFuzzer for Python, manylinux wheels)
        ],
        # Speech to text (gateway/audio/, lanes/audio/): the Whisper lane's runtime and the
        # gateway's audio decoder. The model itself: `laneserve pull whisper-base`.
        "audio": [
            "faster-whisper>=1.1",
            "ctranslate2>=4.5",
            "av>=12",
        ],
    },
    entry_points={"console_scripts": ["laneserve=gateway.cli.main:main"]},
    zip_safe=False,
)
