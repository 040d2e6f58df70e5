"""appliance bundle verify [DIR]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.commands.common import EXIT_FAILED, EXIT_OK, add_config_option, settings_or_exit
from engines.errors import BundleError
from engines.manifest import Manifest


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bundle", help="inspect the engine bundle")
    actions = parser.add_subparsers(dest="bundle_command", required=True, metavar="ACTION")
    verify = actions.add_parser("verify", help="check every file of the bundle against its manifest")
    verify.add_argument("dir", type=Path, nargs="?", help="bundle folder (default: from the configuration)")
    verify.add_argument("--quick", action="store_true", help="presence and size only, no checksums")
    add_config_option(verify)
    verify.set_defaults(handler=handle_verify)


def handle_verify(args: argparse.Namespace) -> int:
    bundle_dir = args.dir
    if bundle_dir is None:
        settings = settings_or_exit(args)
        bundle_dir = settings.bundle.dir
    try:
        manifest = Manifest.read(bundle_dir)
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    problems = manifest.verify(bundle_dir, full=not args.quick)
    if problems:
        print(f"{bundle_dir}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        print(f"fix: rebuild it: python -m build_scripts bundle --out {bundle_dir}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{bundle_dir}: OK ({len(manifest.artifacts)} artifacts verified)")
    return EXIT_OK
