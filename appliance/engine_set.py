"""Builds the four engines from the settings through the engine factories, and loads them.

Engines never see ``Settings``: this module turns the appliance's sections into the factories'
plain keyword arguments.
"""

from __future__ import annotations

import logging

from appliance.config import Settings
from appliance.pipeline.session import SessionEngines
from engines.manifest import Bundle

log = logging.getLogger(__name__)


def system_prompt(settings: Settings) -> str:
    """The agent's persona with the site filled in."""
    agent = settings.agent
    return agent.persona.replace("{site_name}", agent.site_name).replace("{device_id}", agent.device_id)


def open_bundle(settings: Settings, *, full: bool | None = None) -> Bundle:
    """The configured bundle, checked: file presence and sizes, and checksums when ``full`` (by
    default ``bundle.verify_on_start``)."""
    check_sums = settings.bundle.verify_on_start if full is None else full
    return Bundle.open(settings.bundle.dir, verify=True, full=check_sums)


LLAMA_FIX = (
    "install a llama-cpp-python built for this processor: in a checkout run ./scripts/setup, which "
    "rebuilds it with a portable profile when a build crashes (README: Supported machines)"
)


def check_llm_runs(bundle: Bundle) -> None:
    """Decode a few tokens in a child process before llama.cpp is loaded into the daemon: a build
    for instructions this processor cannot run kills the process on its first token, and the
    daemon must say so and stop rather than die on a signal in a restart loop."""
    from engines.errors import BackendUnavailable
    from engines.llm.smoke import library_location, run_smoke, smallest_gguf

    model = smallest_gguf(bundle.root)
    if model is None:
        return  # no language model at all: the LLM factory names that problem
    result = run_smoke(model)
    if not result.ok:
        raise BackendUnavailable(
            f"llama.cpp ({library_location()}) cannot run here: {result.detail}", fix=LLAMA_FIX
        )
    log.info("llama.cpp runs on this processor (%s in %.1f s)", result.detail, result.seconds)


def build_engines(settings: Settings, bundle: Bundle) -> SessionEngines:
    """The four engines, unloaded, each with its worker thread. Raises the factories' errors
    (engines.errors.BackendUnavailable / ModelFileError) for a backend or model that is not there."""
    from engines.asr import create_asr
    from engines.llm import create_llm
    from engines.tts import create_tts
    from engines.vad import create_vad

    vad = create_vad(bundle, backend=settings.vad.backend, threads=settings.vad.threads)
    asr = create_asr(
        bundle,
        model=settings.asr.model,
        backend=settings.asr.backend,
        device=settings.asr.device,
        precision=settings.asr.precision,
        language=settings.asr.language,
        encode_real_length=settings.asr.encode_real_length,
        threads=settings.asr.threads,
    )
    llm = create_llm(
        bundle,
        model=settings.llm.model,
        system_prompt=system_prompt(settings),
        gpu_layers=settings.llm.gpu_layers,
        context_tokens=settings.llm.context_tokens,
        max_reply_tokens=settings.llm.max_reply_tokens,
        temperature=settings.llm.temperature,
        threads=settings.llm.threads,
        stop=settings.llm.stop,
    )
    tts = create_tts(bundle, voice=settings.tts.voice, length_scale=settings.tts.length_scale)
    return SessionEngines.create(vad=vad, asr=asr, llm=llm, tts=tts)


async def load_engines(engines: SessionEngines) -> dict[str, float]:
    """Load and warm every engine, in parallel on their own threads; seconds per engine."""
    seconds = await engines.load()
    log.info("engines loaded: %s", ", ".join(f"{name} {value:.2f} s" for name, value in seconds.items()))
    return seconds
