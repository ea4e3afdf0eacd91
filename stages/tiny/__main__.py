"""`python -m stages.tiny OUT_DIR [--only NAME ...]`: build the tiny checkpoints that are missing.

`python -m stages.tiny --real-shapes OUT_DIR [--only NAME ...]`: write the real-shape directories
(published configs with the tiny tokenizer and processor files, no weights; serve them with
`load_format: dummy`)."""

from __future__ import annotations

import argparse
import sys

from stages.tiny import BUILDERS, REAL_SHAPES, build_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.tiny", description=__doc__)
    parser.add_argument("out_dir", help="root folder; each checkpoint goes to OUT_DIR/<name>")
    parser.add_argument(
        "--real-shapes", action="store_true", help=f"write the real-shape directories ({', '.join(REAL_SHAPES)})"
    )
    parser.add_argument("--only", nargs="+", choices=sorted({*BUILDERS, *REAL_SHAPES}), help="build only these")
    args = parser.parse_args(argv)
    builders = REAL_SHAPES if args.real_shapes else BUILDERS
    unknown = sorted(set(args.only or ()) - set(builders))
    if unknown:
        parser.error(f"{', '.join(unknown)}: not a {'real-shape' if args.real_shapes else 'tiny'} checkpoint")
    build_all(args.out_dir, only=args.only, progress=lambda line: print(line, flush=True), builders=builders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
