"""`python -m stages.tiny OUT_DIR [--only NAME ...]`: build the tiny checkpoints that are missing."""

from __future__ import annotations

import argparse
import sys

from stages.tiny import BUILDERS, build_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.tiny", description=__doc__)
    parser.add_argument("out_dir", help="root folder; each checkpoint goes to OUT_DIR/<name>")
    parser.add_argument("--only", nargs="+", choices=sorted(BUILDERS), help="build only these")
    args = parser.parse_args(argv)
    build_all(args.out_dir, only=args.only, progress=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
