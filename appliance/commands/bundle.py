"""appliance bundle verify [DIR] | list | add-model GGUF | evaluate VERSION | activate VERSION | rollback |
remove VERSION | adopt: check the engine bundle, and choose among the versions kept side by side under
``bundle.dir`` (``engines.bundle_store``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from appliance.commands.common import EXIT_FAILED, EXIT_OK, add_config_option, settings_or_exit
from engines.bundle_store import BundleStore, BundleVersion, resolve_bundle_dir
from engines.errors import BundleError
from engines.manifest import Manifest


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bundle", help="check the engine bundle and choose among its versions")
    actions = parser.add_subparsers(dest="bundle_command", required=True, metavar="ACTION")
    verify = actions.add_parser("verify", help="check every file of the bundle against its manifest")
    verify.add_argument("dir", type=Path, nargs="?", help="bundle folder (default: from the configuration)")
    verify.add_argument("--quick", action="store_true", help="presence and size only, no checksums")
    add_config_option(verify)
    verify.set_defaults(handler=handle_verify)
    register_versions(actions)
    add = actions.add_parser(
        "add-model",
        help="a new language model as a candidate version (the active one plus the model)",
        description="Makes a candidate version from the active one plus GGUF as llm/NAME, ready for "
        "appliance bundle evaluate; the active version is not touched.",
    )
    add.add_argument("gguf", type=Path, help="the model: a .gguf file (or, with --quantize, an f16 one)")
    add.add_argument("--name", required=True, help="its name, as llm.model takes it (e.g. qwen-3b)")
    add.add_argument("--quantize", metavar="TYPE", help="quantize it first (e.g. Q4_K_M, Q4_0)")
    add.add_argument("--label", default="", help="a note for bundle list")
    add.add_argument("--threads", type=int, default=2, help="quantizer threads (default: %(default)s)")
    add.add_argument("--dir", type=Path, default=None, help="bundle root (default: bundle.dir)")
    add_config_option(add)
    add.set_defaults(handler=handle_add_model)


def handle_verify(args: argparse.Namespace) -> int:
    bundle_dir = args.dir
    if bundle_dir is None:
        settings = settings_or_exit(args)
        bundle_dir = settings.bundle.dir
    try:
        bundle_dir = resolve_bundle_dir(bundle_dir)
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


SWITCH_HINT = (
    "a running daemon switches to it between turns (journalctl -u appliance says when), or restarts on it "
    "once no call is in progress when there is no memory for both"
)


def register_versions(actions: argparse._SubParsersAction) -> None:
    for name, help_text, takes_version, handler in (
        ("list", "the bundle's versions, the active and previous ones marked", False, handle_list),
        (
            "evaluate",
            "measure a version against the active one before it serves anyone",
            True,
            handle_evaluate,
        ),
        ("activate", "make a version the active one (the old one is kept)", True, handle_activate),
        ("rollback", "back to the version active before", False, handle_rollback),
        ("remove", "delete a version (never the active or previous one)", True, handle_remove),
        ("adopt", "make an unversioned bundle folder the first version", False, handle_adopt),
    ):
        parser = actions.add_parser(name, help=help_text)
        if takes_version:
            parser.add_argument("version", help="its id, or the start of it")
        parser.add_argument("--dir", type=Path, default=None, help="bundle root (default: bundle.dir)")
        add_config_option(parser)
        parser.set_defaults(handler=handler)
        if name == "evaluate":
            parser.add_argument("--set", type=Path, default=None, help="recordings and transcripts.json")
            parser.add_argument("--model", help="the candidate answers with this llm.model (a model it adds)")
        if name == "activate":
            parser.add_argument("--force", action="store_true", help="even when its evaluation failed")


def _store(args: argparse.Namespace) -> BundleStore:
    root = args.dir if args.dir is not None else settings_or_exit(args).bundle.dir
    return BundleStore(root)


def _describe(version: BundleVersion, marks: str = "") -> str:
    label = f"  {version.label}" if version.label else ""
    size = f"{version.size_bytes / 1e9:.2f} GB"
    return f"{marks:<10}{version.id}  {version.added[:19]}  {version.source:<8} {version.artifacts:>3} artifacts {size:>8}{label}"


def handle_list(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        store.check_layout()
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if not store.versioned:
        print(
            f"{store.root}: one unversioned bundle (appliance bundle adopt --dir {store.root} makes it a version)"
        )
        return EXIT_OK
    try:
        state, versions = store.state(), store.versions()
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{store.root}: {len(versions)} version(s)")
    for version in versions:
        marks = "active" if version.id == state.active else "previous" if version.id == state.previous else ""
        print(_describe(version, marks))
    return EXIT_OK


def _switched(store: BundleStore, what: str) -> str:
    state = store.state()
    return f"{what}: active {state.active}, previous {state.previous or 'none'}; {SWITCH_HINT}"


def _changing(args: argparse.Namespace, change: Callable[[BundleStore], str]) -> int:
    """Run one change of the store; print what it did, or the problem and its fix."""
    store = _store(args)
    try:
        print(change(store))
    except (BundleError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def handle_evaluate(args: argparse.Namespace) -> int:
    from appliance.config import override
    from appliance.daemon.canary import evaluate

    settings = settings_or_exit(args)
    if args.dir is not None:
        settings = override(settings, bundle={"dir": str(args.dir)})
    try:
        evaluation = evaluate(settings, args.version, set_dir=args.set, model=args.model)
    except (BundleError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(evaluation.report())
    return EXIT_OK if evaluation.passed else EXIT_FAILED


def handle_activate(args: argparse.Namespace) -> int:
    def activate(store: BundleStore) -> str:
        from appliance.daemon.canary import read_evaluation

        chosen = store.get(args.version)
        evaluation = read_evaluation(chosen)
        if evaluation is not None and not evaluation.passed and not args.force:
            raise BundleError(
                f"version {chosen.id} failed its evaluation:\n{evaluation.report()}",
                fix=f"keep the active one, or activate it anyway: appliance bundle activate {chosen.id} --force",
            )
        store.activate(chosen.id)
        note = "" if evaluation is not None else f" (not evaluated: appliance bundle evaluate {chosen.id})"
        return _switched(store, "activated") + note

    return _changing(args, activate)


def handle_rollback(args: argparse.Namespace) -> int:
    def rollback(store: BundleStore) -> str:
        store.rollback()
        return _switched(store, "rolled back")

    return _changing(args, rollback)


def handle_remove(args: argparse.Namespace) -> int:
    def remove(store: BundleStore) -> str:
        removed = store.remove(args.version)
        return f"removed {removed.id} ({removed.size_bytes / 1e9:.2f} GB freed)"

    return _changing(args, remove)


def handle_add_model(args: argparse.Namespace) -> int:
    from build_scripts.add_model import add_model, describe
    from engines.errors import EngineError

    settings = settings_or_exit(args)
    root = args.dir if args.dir is not None else settings.bundle.dir
    try:
        added = add_model(
            root.expanduser(),
            args.gguf.expanduser(),
            args.name,
            file_type=args.quantize,
            label=args.label,
            threads=args.threads,
        )
    except (EngineError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(describe(added, settings.llm.model)))
    return EXIT_OK


def handle_adopt(args: argparse.Namespace) -> int:
    def adopt(store: BundleStore) -> str:
        return f"{store.root}: the bundle is now version {store.adopt().id}, active"

    return _changing(args, adopt)
