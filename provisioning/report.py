"""Step 8: the provisioning report, as JSON and as text, saved in the state folder on the device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provisioning.context import ProvisioningContext
from provisioning.files import atomic_write_text
from provisioning.framework import DONE, StateStore, StepOutcome, StepRecord, now_iso
from provisioning.preflight import platform_summary

REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
REPORT_FORMAT = 1


def build_report(ctx: ProvisioningContext, store: StateStore, step_titles: dict[str, str]) -> dict[str, Any]:
    from appliance import __version__

    steps = []
    for name, title in step_titles.items():
        record = store.get(name) or StepRecord(name, "not run")
        steps.append({"title": title, **record.to_dict()})
    statuses = [s["status"] for s in steps]
    overall = "passed" if all(s == DONE for s in statuses) else "failed"
    site: dict[str, Any] = next((s["outputs"] for s in steps if s["name"] == "site-config"), {}) or {}
    return {
        "format": REPORT_FORMAT,
        "generated_at": now_iso(),
        "result": overall,
        "target": ctx.target,
        "software_version": __version__,
        "device": {
            **platform_summary(),
            "device_id": site.get("device_id"),
            "site_name": site.get("site_name"),
        },
        "system_root": str(ctx.system_root),
        "state_dir": str(ctx.state_dir),
        "steps": steps,
        "failed_steps": [s["name"] for s in steps if s["status"] != DONE],
    }


def render_text(report: dict[str, Any]) -> str:
    device = report["device"]
    lines = [
        f"Provisioning report: {report['result'].upper()}",
        f"  generated   {report['generated_at']}",
        f"  device      {device.get('device_id')} ({device.get('hostname')}, {device.get('machine')})",
        f"  site        {device.get('site_name')}",
        f"  target      {report['target']}, software {report['software_version']}",
        "",
    ]
    for number, step in enumerate(report["steps"], start=1):
        lines.append(f"{number}. {step['title']}: {step['status'].upper()}")
        if step.get("summary"):
            lines.append(f"   {step['summary']}")
        if step.get("error"):
            lines.append(f"   problem: {step['error']}")
        if step.get("fix") and step["status"] != DONE:
            lines.append(f"   fix: {step['fix']}")
        for check in step.get("outputs", {}).get("checks", []) if step["name"] == "preflight" else []:
            line = f"   - {check['name']}: {check['status']}: {check['detail']}"
            lines.append(line + (f" (fix: {check['fix']})" if check.get("fix") else ""))
    return "\n".join(lines) + "\n"


def write_report(
    ctx: ProvisioningContext, store: StateStore, step_titles: dict[str, str]
) -> tuple[Path, Path]:
    report = build_report(ctx, store, step_titles)
    json_path, text_path = ctx.state_dir / REPORT_JSON, ctx.state_dir / REPORT_TEXT
    atomic_write_text(json_path, json.dumps(report, indent=2, default=str) + "\n")
    atomic_write_text(text_path, render_text(report))
    return json_path, text_path


def run_report(ctx: ProvisioningContext, store: StateStore, step_titles: dict[str, str]) -> StepOutcome:
    json_path, text_path = write_report(ctx, store, step_titles)
    report = json.loads(json_path.read_text(encoding="utf-8"))
    return StepOutcome(
        f"{report['result']}: saved {json_path} and {text_path}",
        {"json": str(json_path), "text": str(text_path), "result": report["result"]},
    )
