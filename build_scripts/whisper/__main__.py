"""python -m build_scripts.whisper export CHECKPOINT --model NAME --bundle DIR

Adds another Whisper checkpoint (CTranslate2 folder, transformers folder such as distil-whisper, or
an OpenAI .pt) to an engine bundle as ONNX graphs; select it with ``asr.model = "NAME"``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from pathlib import Path

from build_scripts.context import BuildContext
from build_scripts.whisper.load import FORMATS, detect_format, load_checkpoint
from build_scripts.whisper.step import export_into_bundle
from engines.errors import EngineError, ModelFileError
from engines.manifest import Manifest, sha256_of


def _tokenizer_for(checkpoint: Path, given: Path | None) -> Path:
    if given is not None:
        return given
    candidate = (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "tokenizer.json"
    if not candidate.is_file():
        raise ModelFileError(
            f"no tokenizer.json next to {checkpoint}",
            fix="pass --tokenizer FILE (the checkpoint's tokenizer.json; multilingual Whisper models share one)",
        )
    return candidate


def _digest(checkpoint: Path) -> str:
    """sha256 of a checkpoint file, or of the names and checksums of a folder's files."""
    if checkpoint.is_file():
        return sha256_of(checkpoint)
    if not checkpoint.is_dir():
        raise ModelFileError(f"{checkpoint} does not exist", fix="check the path")
    lines = "".join(f"{p.name} {sha256_of(p)}\n" for p in sorted(checkpoint.iterdir()) if p.is_file())
    return hashlib.sha256(lines.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.whisper", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="export a checkpoint to ONNX into a bundle")
    export.add_argument("checkpoint", type=Path)
    export.add_argument("--model", required=True, help="name in the bundle, e.g. distil-small.en")
    export.add_argument("--bundle", type=Path, required=True)
    export.add_argument("--format", choices=FORMATS, default="auto")
    export.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: next to it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    bundle_dir = args.bundle.expanduser()
    checkpoint = args.checkpoint.expanduser()
    try:
        tokenizer = _tokenizer_for(checkpoint, args.tokenizer)
        fmt = detect_format(checkpoint) if args.format == "auto" else args.format
        weights = (
            checkpoint if checkpoint.is_file() else sorted(p for p in checkpoint.iterdir() if p.is_file())
        )
        digest = sha256_of(weights) if isinstance(weights, Path) else "folder"
        source = {
            "checkpoint": str(checkpoint),
            "format": fmt,
            "sha256": digest,
            "tokenizer sha256": sha256_of(tokenizer),
        }
        ctx = BuildContext(out=bundle_dir, manifest=Manifest.read(bundle_dir))
        export_into_bundle(ctx, args.model, lambda: load_checkpoint(checkpoint, fmt), tokenizer, source)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{args.model}: ONNX graphs recorded in {bundle_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
