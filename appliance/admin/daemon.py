"""Starting the admin page from the daemon: one call, run as a task on the daemon's event loop.

```python
registry = LiveRegistry()
registry.expect_engines(["vad", "asr", "llm", "tts"])
task = asyncio.create_task(run_admin_page(settings, store, registry, bundle, config_path=args.config))
...  # after the engines are loaded and warmed:
for state in engine_states(settings, load_seconds):
    registry.set_engine(state)
```
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Protocol

from appliance.admin.app import create_app
from appliance.admin.backend import LiveRegistry
from appliance.admin.local import ApplyHook, LocalBackend, PanelHooks
from appliance.admin.protocol import ConnectionLimits
from appliance.admin.schemas import BundleSummary, EngineState, LlmLoad
from appliance.admin.server import serve
from appliance.admin.tls import admin_tls
from appliance.config import EndpointerMode, Settings
from appliance.trace import TraceStore

log = logging.getLogger(__name__)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _llm_described(settings: Settings) -> tuple[str, str, str, str]:
    llm, server = settings.llm, settings.llm_server
    if llm.backend == "openai":
        behind = f", then the local {llm.model}" if server.server_fallback == "local" else ""
        return (
            "llm",
            f"site server {server.server_url}{behind}",
            server.server_model or "the server's",
            "llama-cpp-python",
        )
    return ("llm", f"llama.cpp ({llm.gpu_layers} GPU layers)", llm.model, "llama-cpp-python")


def engine_states(
    settings: Settings, load_seconds: Mapping[str, float] | None = None, *, warm: bool = True
) -> list[EngineState]:
    """The engines as configured (the end-of-turn model in smart_turn mode only), marked loaded (and
    warm) with their load times."""
    seconds = load_seconds or {}
    asr_runtime = "tensorrt" if settings.asr.backend == "tensorrt" else "onnxruntime"
    described: list[tuple[str, str, str, str]] = [
        (
            "vad",
            settings.vad.backend,
            "silero",
            "torch" if settings.vad.backend == "torch" else "onnxruntime",
        ),
        (
            "asr",
            f"{settings.asr.backend} ({settings.asr.device}, {settings.asr.precision})",
            "whisper",
            asr_runtime,
        ),
        _llm_described(settings),
        ("tts", "piper", settings.tts.voice, "piper-tts"),
    ]
    if settings.endpointer.mode == EndpointerMode.SMART_TURN:
        described.append(("turn", "onnxruntime (cpu)", "smart-turn-v3.2", "onnxruntime"))
    partial = settings.partials.separate_model(settings.asr.model)
    if partial is not None:
        described.append(("asr_partial", described[1][1], partial, asr_runtime))
    if "aec" in seconds:  # loaded only where a session cancels its echo
        extras = [f"delay {settings.audio.echo_delay_ms:g} ms"]
        extras += ["noise suppression"] * settings.aec.echo_noise_suppression
        described.append(("aec", f"webrtc ({', '.join(extras)})", "aec3", "livekit"))
    return [
        EngineState(
            name=name,
            backend=backend,
            model=model,
            runtime_version=_version(package),
            loaded=True,
            warm=warm,
            load_s=seconds.get(name),
        )
        for name, backend, model, package in described
    ]


class Occupancy(Protocol):
    """What the LLM engine says of its slots (``engines.llm.LlmOccupancy``)."""

    @property
    def slots(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def max_queue(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def decode_steps(self) -> int: ...
    @property
    def decode_step_tokens(self) -> int: ...


def llm_load(now: Occupancy) -> LlmLoad:
    """The admin page's view of the LLM's slots and queue."""
    steps = now.decode_steps
    return LlmLoad(
        slots=now.slots,
        answering=now.running,
        waiting=now.waiting,
        max_queue=now.max_queue,
        evictions=now.evictions,
        mean_batch=round(now.decode_step_tokens / steps, 2) if steps else None,
    )


async def run_admin_page(
    settings: Settings,
    store: TraceStore,
    registry: LiveRegistry,
    bundle: BundleSummary,
    *,
    config_path: Path | None = None,
    live_keys: Iterable[str] = (),
    on_apply: ApplyHook | None = None,
    notice: str | None = None,
    started: asyncio.Event | None = None,
    hooks: PanelHooks | None = None,
) -> None:
    """Serve the admin page on ``admin.bind_host:admin.port`` until cancelled; returns at once when
    ``admin.enabled`` is false. Raises OSError naming the fix when the address cannot be used.
    ``started`` is set once requests are accepted."""
    if not settings.admin.enabled:
        log.info("admin page disabled (admin.enabled = false)")
        return
    admin = settings.admin
    tls = admin_tls(admin, settings.agent.device_id)  # TlsSetupError (an OSError) names the fix
    if tls.warning:
        registry.add_notice(tls.warning)
    backend = LocalBackend(
        settings,
        store,
        registry,
        bundle,
        config_path=config_path,
        live_keys=live_keys,
        on_apply=on_apply,
        notice=notice,
        hooks=hooks,
        certificate=tls.fingerprint or None,
    )
    await serve(
        create_app(backend, settings, tls=tls),
        admin.bind_host,
        admin.port,
        limits=ConnectionLimits.of(admin),
        started=started,
        tls=tls,
    )
