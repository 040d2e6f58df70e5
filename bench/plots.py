"""PNG plots of an end-to-end result: per-stage distribution, latency vs sequential, CDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STAGE_ORDER = ("endpoint_wait", "asr", "llm_first_token", "first_clause", "tts_first_audio", "turn_latency")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _rows(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in model["turns"] if row.get("latency_ms") is not None]


def plot_stages(result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    models = result["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        rows = _rows(model)
        data = [
            [row["stages_ms"][s] for row in rows if row["stages_ms"].get(s) is not None] for s in STAGE_ORDER
        ]
        ax.boxplot([d or [0.0] for d in data], showfliers=True)
        ax.set_xticks(range(1, len(STAGE_ORDER) + 1), list(STAGE_ORDER), rotation=30, ha="right")
        ax.set_ylabel("ms")
        ax.set_title(f"{model['llm']}: stage latency ({len(rows)} turns)")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "stages.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_vs_sequential(result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    models = result["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        rows = _rows(model)
        x = list(range(len(rows)))
        width = 0.27
        ax.bar(
            [i - width for i in x],
            [r["floor"]["floor_ms"] for r in rows],
            width,
            label="floor (engines only)",
        )
        ax.bar(x, [r["latency_ms"] for r in rows], width, label="pipeline turn latency")
        ax.bar([i + width for i in x], [r["floor"]["sequential_ms"] for r in rows], width, label="sequential")
        ax.set_xticks(
            x, [r["file"].rsplit(".", 1)[0][:22] for r in rows], rotation=40, ha="right", fontsize=7
        )
        ax.set_ylabel("ms, end of speech -> first audio")
        ax.set_title(f"{model['llm']}: pipeline vs floor vs sequential")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "latency_vs_sequential.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cdf(result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, model in enumerate(result["models"]):
        rows = _rows(model)
        color = f"C{index}"  # one colour per LLM: solid pipeline, dashed sequential
        for label, values, style in (
            ("turn latency", [r["latency_ms"] for r in rows], "-"),
            ("sequential", [r["floor"]["sequential_ms"] for r in rows], "--"),
        ):
            ordered = sorted(values)
            if not ordered:
                continue
            fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
            ax.step(ordered, fractions, style, color=color, where="post", label=f"{model['llm']} {label}")
    ax.set_xlabel("ms, end of speech -> first audio")
    ax.set_ylabel("fraction of turns")
    ax.set_title("CDF of turn latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "latency_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(result: dict[str, Any], out: Path) -> list[Path]:
    return [plot_stages(result, out), plot_vs_sequential(result, out), plot_cdf(result, out)]
