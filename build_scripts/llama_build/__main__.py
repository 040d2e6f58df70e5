"""python -m build_scripts.llama_build install|check --wheels DIR [--bundle DIR]"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from build_scripts.llama_build.ensure import SetupFailed, Toolbox, check, install, parse_extra
from build_scripts.llama_build.profile import BEST, SAFE, UnsupportedMachine, cpu_features
from build_scripts.llama_build.wheel import current_venv

DEFAULT_VERSION = "0.3.36"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.llama_build", description=__doc__)
    parser.add_argument("command", choices=("install", "check", "profile"))
    parser.add_argument("--wheels", type=Path, required=True, help="the wheel cache folder")
    parser.add_argument("--bundle", type=Path, help="engine bundle whose smallest GGUF the check decodes")
    parser.add_argument("--version", default=DEFAULT_VERSION, help="llama-cpp-python version")
    parser.add_argument("--level", choices=(BEST, SAFE), default=BEST, help="instruction-set profile")
    args = parser.parse_args(argv)
    tools = Toolbox(
        python=sys.executable,
        venv=current_venv(),
        version=args.version,
        features=cpu_features(),
        extra_args=parse_extra(os.environ.get("CMAKE_ARGS")),
        log=lambda line: print(line, flush=True),
    )
    wheels = args.wheels.expanduser()
    try:
        if args.command == "profile":
            print(tools.profile(args.level).describe())
        elif args.command == "install":
            install(tools, wheels, args.level)
        else:
            if args.bundle is None:
                parser.error("check needs --bundle")
            check(tools, wheels, args.bundle.expanduser())
    except (SetupFailed, UnsupportedMachine, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
