"""The `laneserve` command line."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="laneserve",
        description="Local high-throughput LLM server (OpenAI and Ollama protocols) on our own CPU runtime.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("serve", help="serve models over HTTP (OpenAI + Ollama protocols)")
    sub.add_parser("models", help="list known and installed models")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "models":
        from lanes.model_files import KNOWN_MODELS, find_model_file

        for name, known in KNOWN_MODELS.items():
            try:
                where = str(find_model_file(name))
            except (FileNotFoundError, ValueError) as exc:
                where = f"not installed ({exc})"
            print(f"{name:10s} {known.description}\n           {where}")
        return 0
    print(f"laneserve {args.command}: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
