"""Step 6: install and enable the systemd units (and the appliance's system user).

The units in ``systemd/`` name ``/opt/appliance/venv``; installing them substitutes the virtual
environment this tool runs from. Then ``systemd-sysusers`` creates the user, ``systemd-analyze
verify`` checks the installed units, and ``systemctl enable`` enables the daemon (offline with
``--root`` when ``--system-root`` is not ``/`` or systemd is not running).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioning.context import DEVICE_STATE_DIR, ProvisioningContext
from provisioning.files import SERVICE_USER, atomic_write_text, give_to_service_user, under_root
from provisioning.framework import StepFailed, StepOutcome

UNITS_SOURCE_DIR = Path(__file__).resolve().parents[1] / "systemd"
SERVICE_UNIT = "appliance.service"
ENGINES_UNIT = "appliance-engines.service"
UNIT_FILES = (SERVICE_UNIT, ENGINES_UNIT)
SYSUSERS_SOURCE = "appliance.sysusers.conf"
SYSUSERS_NAME = "appliance.conf"
PLACEHOLDER_PREFIX = "/opt/appliance/venv"
EXPOSURE_GOAL = 3.0
_EXPOSURE = re.compile(r"Overall exposure level for \S+: ([\d.]+) (\w+)")


@dataclass(frozen=True)
class CommandResult:
    args: list[str]
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        # systemd-analyze verify exits 0 on directives it ignores; any message counts as a failure.
        return self.returncode == 0 and not self.output


def _run(args: list[str], timeout_s: float = 120) -> CommandResult:
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout_s)
    return CommandResult(args, proc.returncode, (proc.stdout + proc.stderr).strip())


def render_unit(text: str, python_prefix: Path) -> str:
    return text.replace(PLACEHOLDER_PREFIX, str(python_prefix))


def read_unit_sources(source_dir: Path = UNITS_SOURCE_DIR) -> dict[str, str]:
    missing = [n for n in (*UNIT_FILES, SYSUSERS_SOURCE) if not (source_dir / n).is_file()]
    if missing:
        raise StepFailed(
            f"unit files missing from {source_dir}: {', '.join(missing)}",
            fix="reinstall the appliance software from its release (the systemd/ folder ships with it)",
        )
    return {n: (source_dir / n).read_text(encoding="utf-8") for n in (*UNIT_FILES, SYSUSERS_SOURCE)}


def verify_units(paths: list[Path]) -> CommandResult:
    return _run(["systemd-analyze", "verify", *map(str, paths)])


def exposure_score(unit_path: Path) -> tuple[float, str] | None:
    """``systemd-analyze security --offline=yes`` on a unit file: (score, rating), None if unavailable."""
    result = _run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit_path)])
    match = _EXPOSURE.search(result.output)
    return (float(match.group(1)), match.group(2)) if match else None


def _systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def run_units(ctx: ProvisioningContext) -> StepOutcome:
    for tool in ("systemd-analyze", "systemctl", "systemd-sysusers"):
        if shutil.which(tool) is None:
            raise StepFailed(f"{tool} not found", fix="sudo apt install systemd")
    sources = read_unit_sources()
    installed: list[Path] = []
    for name in UNIT_FILES:
        target = ctx.unit_dir / name
        atomic_write_text(target, render_unit(sources[name], ctx.python_prefix), mode=0o644)
        installed.append(target)
    sysusers = ctx.sysusers_dir / SYSUSERS_NAME
    atomic_write_text(sysusers, sources[SYSUSERS_SOURCE], mode=0o644)

    verify = verify_units(installed)
    if not verify.clean:
        raise StepFailed(
            f"systemd-analyze verify rejected the units: {verify.output}",
            fix="reinstall the appliance software; if it persists, send this report to support",
            outputs={"installed": [str(p) for p in installed]},
        )
    score = exposure_score(installed[0])

    live = ctx.on_live_system and _systemd_running()
    root_args = [] if live else [f"--root={ctx.system_root}"]
    if not ctx.on_live_system:
        (ctx.system_root / "etc").mkdir(parents=True, exist_ok=True)
    steps = [["systemd-sysusers", *root_args, str(sysusers)]]
    if live:
        steps.append(["systemctl", "daemon-reload"])
    steps.append(["systemctl", *root_args, "enable", SERVICE_UNIT])
    log_lines = []
    for args in steps:
        result = _run(args)
        log_lines.append(f"$ {' '.join(args)}\n{result.output}".strip())
        if result.returncode != 0:
            raise StepFailed(
                f"`{' '.join(args)}` failed: {result.output}",
                fix="run it by hand to see why (as root), then: python -m provisioning run --from units",
                outputs={"installed": [str(p) for p in installed], "log": log_lines},
            )
    state_root = under_root(ctx.system_root, DEVICE_STATE_DIR)
    owned = give_to_service_user(state_root, ctx.system_root)
    outputs = {
        "installed": [str(p) for p in installed] + [str(sysusers)],
        "state_owned_by": SERVICE_USER if owned else None,
        "exec_prefix": str(ctx.python_prefix),
        "verify": "passed",
        "exposure": {"score": score[0], "rating": score[1], "goal": EXPOSURE_GOAL} if score else None,
        "enabled": SERVICE_UNIT,
        "mode": "live" if live else f"offline (--root={ctx.system_root})",
        "log": log_lines,
    }
    shown = f", exposure {score[0]} {score[1]}" if score else ""
    start_hint = "starts at boot or with: sudo systemctl start appliance" if live else "enabled offline"
    return StepOutcome(f"{SERVICE_UNIT} installed and enabled{shown}; {start_hint}", outputs)


def units_still_valid(ctx: ProvisioningContext) -> bool:
    try:
        sources = read_unit_sources()
    except StepFailed:
        return False
    for name in UNIT_FILES:
        target = ctx.unit_dir / name
        if not target.is_file() or target.read_text(encoding="utf-8") != render_unit(
            sources[name], ctx.python_prefix
        ):
            return False
    return True
