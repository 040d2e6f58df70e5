"""Does this llama.cpp build run on this machine? A few tokens decoded in a child process.

A build compiled for instructions the processor cannot execute does not raise: it kills the process
on the first token (SIGILL, or SIGSEGV from a faulting AMX tile load). So the check runs in a child,
and the parent reads how it ended. ``python -m engines.llm.smoke MODEL.gguf`` is the child.

``APPLIANCE_LLM_SMOKE_FAULT=SIGSEGV`` (any signal name) makes the child kill itself with that
signal once the library is loaded: the way to rehearse a bad build without compiling one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FAULT_ENV = "APPLIANCE_LLM_SMOKE_FAULT"
TIMEOUT_S = 180.0
# Long enough that the prompt runs through the batched matrix kernels, not only the one-row ones.
_PROMPT = (
    "The appliance checks that its language model runs on this processor. It reads this sentence, "
    "which is long enough to be evaluated as one batch of tokens, and then writes a few more words:"
)
_NEW_TOKENS = 4


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    detail: str  # one line: what ran, or how it died
    signal_name: str | None = None
    seconds: float = 0.0
    system_info: str = ""

    @property
    def crashed(self) -> bool:
        return self.signal_name is not None


def library_location() -> str:
    """Where the llama.cpp libraries of the installed llama-cpp-python are (without loading them)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return "llama-cpp-python is not installed"
    return str(Path(spec.origin).parent / "lib")


def run_smoke(model: Path, *, python: str | None = None, timeout_s: float = TIMEOUT_S) -> SmokeResult:
    """Decode a few tokens of ``model`` in a child process and say how it went."""
    command = [python or sys.executable, "-m", "engines.llm.smoke", str(model)]
    started = time.monotonic()
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return SmokeResult(False, f"the smoke decode of {model.name} did not finish in {timeout_s:.0f} s")
    seconds = time.monotonic() - started
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return SmokeResult(
            False, f"the smoke decode of {model.name} died on {name}", signal_name=name, seconds=seconds
        )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return SmokeResult(False, f"the smoke decode of {model.name} failed: {tail}", seconds=seconds)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return SmokeResult(False, f"the smoke decode gave no report: {proc.stdout[-200:]!r}", seconds=seconds)
    return SmokeResult(
        True,
        f"decoded {report['prompt_tokens']} + {report['new_tokens']} tokens of {model.name}",
        seconds=seconds,
        system_info=str(report.get("system_info", "")),
    )


def smallest_gguf(bundle_dir: Path) -> Path | None:
    """The smallest language model in a bundle, or in a versioned root's active version (read
    straight from the manifest)."""
    try:
        # Plain JSON, not engines.manifest: the set-up imports this module before the project's
        # dependencies are installed (engines.manifest needs tomli on Python 3.10).
        if not (bundle_dir / "manifest.json").is_file() and (bundle_dir / "bundles.json").is_file():
            active = json.loads((bundle_dir / "bundles.json").read_text())["active"]
            bundle_dir = bundle_dir / "versions" / str(active)
        entries = json.loads((bundle_dir / "manifest.json").read_text())["artifacts"]
        models = [a for a in entries if a.get("kind") == "llm-gguf"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    for entry in sorted(models, key=lambda a: int(a.get("size_bytes", 0))):
        path = bundle_dir / str(entry["path"])
        if path.is_file():
            return path
    return None


def _child(model: Path) -> int:
    from engines.llm.llama_runtime import LlamaRuntime, SamplingParams, llama_cpp

    fault = os.environ.get(FAULT_ENV)
    if fault:
        os.kill(os.getpid(), signal.Signals[fault.upper()])
    runtime = LlamaRuntime(model, gpu_layers=0, context_tokens=256, threads=min(2, os.cpu_count() or 1))
    prompt = runtime.tokenize(_PROMPT)
    runtime.decode(([runtime.bos_token] if runtime.adds_bos else []) + prompt)
    sampler = runtime.sampler(SamplingParams(temperature=0.0))
    new = []
    for _ in range(_NEW_TOKENS):
        token = runtime.sample(sampler)
        new.append(token)
        runtime.decode([token])
    runtime.free_sampler(sampler)
    runtime.close()
    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    print(json.dumps({"prompt_tokens": len(prompt), "new_tokens": len(new), "system_info": info}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m engines.llm.smoke MODEL.gguf", file=sys.stderr)
        sys.exit(2)
    sys.exit(_child(Path(sys.argv[1])))
