"""The `omnistage` console script (pyproject.toml). Today one command: `omnistage bench serve`.
It needs no Django settings: it is a client of a platform running elsewhere."""

from __future__ import annotations

import argparse
import sys

from client.bench.options import OptionsError, ServeOptions, add_serve_arguments


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="omnistage", description="Omnistage's command-line client.")
    commands = root.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="benchmarks").add_subparsers(dest="benchmark", required=True)
    serve = bench.add_parser(
        "serve", help="measure a running deployment through its OpenAI-compatible API",
        description="Measure a running deployment through its OpenAI-compatible API (docs/bench-serve.md).",
    )  # fmt: skip
    add_serve_arguments(serve)
    return root


def main(argv: list[str] | None = None) -> int:
    from client.bench.serve import run

    args = parser().parse_args(argv)
    try:
        options = ServeOptions.from_mapping(vars(args))
    except OptionsError as error:
        print(f"bench serve: {error}", file=sys.stderr)
        return 1
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
