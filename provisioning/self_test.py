"""Step 7: one real turn through the installed configuration, its latency against the budget.

A spoken question is synthesized with the bundle's own voice (``appliance say``), then answered by
the full pipeline (``appliance talk --json``) exactly as the daemon would: VAD, Whisper, the language
model, Piper. Both run as separate processes with the device's configuration.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from appliance.config import ConfigError, load_settings
from provisioning.context import ProvisioningContext
from provisioning.files import under_root
from provisioning.framework import StepFailed, StepOutcome
from provisioning.progress import elapsed_bar

EXIT_NOT_BUILT = 3
MIN_WORD_OVERLAP = 0.5  # of the question's words found in the transcript


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_overlap(expected: str, heard: str) -> float:
    want, got = _words(expected), set(_words(heard))
    return sum(w in got for w in want) / len(want) if want else 0.0


def _environment(ctx: ProvisioningContext) -> dict[str, str]:
    # The configuration names device paths; under --system-root they live inside that folder.
    env = dict(os.environ)
    env["APPLIANCE_BUNDLE__DIR"] = str(ctx.bundle_dir)
    env["APPLIANCE_TRACE__DB_PATH"] = str(under_root(ctx.system_root, "/var/lib/appliance/turns.sqlite3"))
    return env


def _run(ctx: ProvisioningContext, args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    command = [str(ctx.appliance_command), *args, "--config", str(ctx.config_file)]
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=_environment(ctx),
            timeout=ctx.self_test_timeout_s,
            check=False,
        )
    except FileNotFoundError as err:
        raise StepFailed(
            f"{ctx.appliance_command} not found", fix="install the appliance software (pip install -e .)"
        ) from err
    except subprocess.TimeoutExpired as err:
        raise StepFailed(
            f"`appliance {args[0]}` took longer than {ctx.self_test_timeout_s:.0f} s",
            fix="check the engines with `appliance chat hello` and `appliance transcribe FILE`",
        ) from err
    error_text = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode == EXIT_NOT_BUILT:
        raise StepFailed(
            f"{what} is not available in this software release: {error_text}",
            fix="install a release in which `appliance say` and `appliance talk` work, then: "
            "python -m provisioning run --from self-test",
            outputs={"command": command, "exit_status": proc.returncode},
        )
    if proc.returncode != 0:
        raise StepFailed(
            f"`appliance {args[0]}` failed (exit status {proc.returncode}): {error_text}",
            fix="read the error above; `appliance bundle verify` and `appliance config check "
            f"{ctx.config_file}` find most causes; then: python -m provisioning run --from self-test",
            outputs={"command": command, "exit_status": proc.returncode, "stderr": proc.stderr[-4000:]},
        )
    return proc


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise StepFailed(
        "`appliance talk --json` printed no JSON object",
        fix="this is a fault in the software release: send the report to support",
        outputs={"stdout": stdout[-4000:]},
    )


def _latency_s(result: dict[str, Any]) -> float | None:
    if isinstance(result.get("turn_latency_s"), (int, float)):
        return float(result["turn_latency_s"])
    if isinstance(result.get("turn_latency_ms"), (int, float)):
        return float(result["turn_latency_ms"]) / 1000.0
    return None


def _rms(path: Path) -> float:
    audio, _ = sf.read(path, dtype="float32", always_2d=True)
    return float(np.sqrt(np.mean(np.square(audio)))) if audio.size else 0.0


def run_self_test(ctx: ProvisioningContext) -> StepOutcome:
    try:
        budget_ms = load_settings(ctx.config_file).trace.budget_ms
    except ConfigError as err:
        raise StepFailed(
            f"the site configuration is not usable: {err}", fix="run --from site-config"
        ) from err
    work = ctx.state_dir / "self-test"
    work.mkdir(parents=True, exist_ok=True)
    question_wav, reply_wav = work / "question.wav", work / "reply.wav"
    reply_wav.unlink(missing_ok=True)
    with elapsed_bar("self-test: synthesizing the question", enabled=ctx.progress):
        _run(ctx, ["say", ctx.self_test_question, "-o", str(question_wav)], "`appliance say`")
    with elapsed_bar("self-test: one turn through the pipeline", enabled=ctx.progress):
        proc = _run(ctx, ["talk", str(question_wav), "--reply", str(reply_wav), "--json"], "`appliance talk`")
    result = _last_json(proc.stdout)
    transcript, reply = str(result.get("transcript", "")), str(result.get("reply", ""))
    latency_s = _latency_s(result)
    outputs: dict[str, Any] = {
        "question": ctx.self_test_question,
        "transcript": transcript,
        "reply": reply,
        "turn_latency_s": latency_s,
        "budget_ms": budget_ms,
        "stages_ms": result.get("stages_ms"),
        "question_wav": str(question_wav),
        "reply_wav": str(reply_wav),
        "talk": result,
    }
    overlap = word_overlap(ctx.self_test_question, transcript)
    outputs["transcript_word_overlap"] = round(overlap, 2)
    problems = []
    if result.get("error"):
        problems.append(f"the pipeline reported an error: {result['error']}")
    if overlap < MIN_WORD_OVERLAP:
        problems.append(f"the transcript {transcript!r} does not match the question")
    if not reply.strip():
        problems.append("the reply is empty")
    if not reply_wav.is_file() or _rms(reply_wav) < 1e-4:
        problems.append("the spoken reply is missing or silent")
    if latency_s is None:
        problems.append("`appliance talk --json` reported no turn_latency_s")
    if problems:
        raise StepFailed(
            "self-test turn failed: " + "; ".join(problems),
            fix="check each engine alone (`appliance transcribe`, `appliance chat`, `appliance say`), then: "
            "python -m provisioning run --from self-test",
            outputs=outputs,
        )
    assert latency_s is not None
    within = latency_s * 1000.0 <= budget_ms
    outputs["within_budget"] = within
    verdict = "within" if within else "over"
    summary = f"heard {transcript!r}, replied {reply[:60]!r}; turn latency {latency_s * 1000:.0f} ms, {verdict} the {budget_ms} ms budget"
    if not within and ctx.target == "jetson":
        raise StepFailed(
            summary,
            fix="set the power mode to maximum (sudo nvpmodel -m 0 && sudo jetson_clocks), check the TensorRT "
            "plans were built (step engines), then: python -m provisioning run --from self-test",
            outputs=outputs,
        )
    if not within:
        summary += " (expected on --target cpu)"
    return StepOutcome(summary, outputs)
