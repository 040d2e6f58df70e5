"""The one road from settings to engines: each engine built from ``(settings, bundle)``, the bundle
opened with one meaning of ``bundle.verify_on_start``, and the session configuration.

Engines never see ``Settings``: each factory takes its component's parameter object, of which the
appliance's configuration section is made (``appliance/config.py``), so every default is declared once,
by the component.
The daemon, every command and every benchmark build their engines here, so a key such as
``llm.threads`` goes to exactly one place (``llm_engine``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from appliance.agent.prompt import FactsPlace, system_prompt
from appliance.config import Settings
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import SessionConfig
from appliance.pipeline.turn import TurnConfig
from appliance.pipeline.turn_sources import Grounding
from appliance.trace.labels import SessionKind
from engines.aec import EchoCanceller
from engines.asr import AsrEngine
from engines.asr.params import AsrParams
from engines.bundle import Bundle
from engines.bundle_store import version_of
from engines.denoise import Denoiser
from engines.errors import EngineError
from engines.llm import LlmEngine
from engines.setting_files import SECRET, read_setting_text
from engines.tts import TtsEngine
from engines.turn import TurnDetector
from engines.vad import VadEngine
from engines.vad.params import EndpointerMode
from engines.wake import WakeWordEngine
from engines.wake.params import ActivationMode

if TYPE_CHECKING:
    from appliance.tools import ToolBox

log = logging.getLogger(__name__)

LLAMA_FIX = (
    "install a llama-cpp-python built for this processor: in a checkout run ./scripts/setup, which "
    "rebuilds it with a portable profile when a build crashes (docs/machines.md)"
)


def open_bundle(settings: Settings, *, daemon_start: bool = False) -> Bundle:
    """The configured bundle, checked: every file present with its recorded size, always; every
    file re-hashed too when the daemon starts and ``bundle.verify_on_start`` is true. Commands
    never re-hash 2 GB to transcribe one file: ``appliance bundle verify`` does that on demand."""
    full = daemon_start and settings.bundle.verify_on_start
    return Bundle.open(settings.bundle.dir, verify=True, full=full)


def vad_engine(settings: Settings, bundle: Bundle) -> VadEngine:
    from engines.vad import create_vad

    return create_vad(bundle, settings.vad)


def asr_engine(settings: Settings, bundle: Bundle, *, model: str | None = None) -> AsrEngine:
    """The configured Whisper (``model``: another one of the bundle, with the same settings)."""
    from engines.asr import create_asr

    asr: AsrParams = settings.asr
    return create_asr(bundle, asr if model is None else asr.model_copy(update={"model": model}))


def tool_box(settings: Settings) -> ToolBox | None:
    """The configured tools (``agent.tools``), unloaded; None when there are none. (The daemon adds
    its live state to what the device tool says: ``ToolBox.device_status``.)"""
    from appliance.tools import ToolBox

    if not settings.agent.tools:
        return None
    return ToolBox(
        settings.agent,
        transfer_targets=tuple(settings.call.transfer_targets),
        transfer_sentence=settings.call.transfer_preamble,
        operator=settings.call.operator_target,
    )


def llm_engine(
    settings: Settings, bundle: Bundle, *, prompt: str | None = None, seed: int | None = None
) -> LlmEngine:
    """The configured LLM with the agent's system prompt (``prompt`` replaces it, for benchmarks) and
    its tools; with ``llm.backend = "openai"`` the site server's, the local model behind it unless
    ``llm_server.server_fallback = "none"`` (no tools then: the server's template is not known here)."""
    llm = settings.llm
    if llm.backend == "openai":
        return _server_llm(settings, bundle, prompt=prompt, seed=seed)
    persona, tools = llm_prompt(settings, bundle)
    return _local_llm(settings, bundle, persona if prompt is None else prompt, tools, seed)


def _local_llm(
    settings: Settings, bundle: Bundle, prompt: str, tools: list[dict[str, object]], seed: int | None
) -> LlmEngine:
    from engines.llm import create_llm

    return create_llm(
        bundle, settings.llm, system_prompt=prompt, slots=llm_slots(settings), seed=seed, tools=tools
    )


def _server_llm(settings: Settings, bundle: Bundle, *, prompt: str | None, seed: int | None) -> LlmEngine:
    from engines.llm.fallback import ServerWithFallback
    from engines.llm.openai_server import OpenAiLlm

    llm, server = settings.llm, settings.llm_server
    key_file = server.server_api_key_file
    persona = llm_prompt(settings, bundle, tools=False)[0] if prompt is None else prompt
    remote = OpenAiLlm(
        server,
        api_key=read_setting_text(key_file, SECRET).strip() if key_file is not None else None,
        system_prompt=persona,
        max_reply_tokens=llm.max_reply_tokens,
        temperature=llm.temperature,
        stop=llm.stop,
        seed=seed,
    )
    local = _local_llm(settings, bundle, persona, [], seed) if server.server_fallback == "local" else None
    return ServerWithFallback(remote, local, retry_s=server.server_retry_s)


def llm_prompt(
    settings: Settings, bundle: Bundle, *, tools: bool = True
) -> tuple[str, list[dict[str, object]]]:
    """The system prompt and the tool definitions the LLM is shown: the tools only when the model's
    chat template has a tool format, and the persona's abilities saying so either way; the site's
    facts in the prompt when they fit ``agent.facts_prompt_tokens``."""
    box = tool_box(settings)
    if box is not None:
        box.load()
    offered = tools and box is not None and model_has_tool_format(bundle, settings.llm.model)
    definitions = box.definitions() if box is not None and offered else []
    place = facts_place(box)
    facts_text = box.facts_prompt_text() if box is not None and place == "prompt" else ""
    select = box is not None and box.site_sentences is not None
    prompt = system_prompt(
        settings.agent,
        tools_offered=offered and bool(definitions),
        facts=place,
        facts_text=facts_text,
        select=select,
    )
    return prompt, definitions


def facts_place(box: ToolBox | None) -> FactsPlace:
    """Where the site's facts reach the model: the system prompt, each question, or nowhere."""
    if box is None or not box.site_facts:
        return "none"
    return "prompt" if box.facts_in_prompt else "question"


def model_has_tool_format(bundle: Bundle, model: str) -> bool:
    """The model's GGUF carries a chat template that can show it tools (from the file's header)."""
    from engines.llm.chat_template import ChatTemplate
    from engines.llm.gguf import read_gguf

    try:
        template = read_gguf(bundle.path(f"llm/{model}")).chat_template
    except EngineError:
        return False  # the factory names a missing or damaged file
    return template is not None and ChatTemplate(template, "gguf").supports_tools


def llm_slots(settings: Settings) -> int:
    """``llm.slots``, or by default one per SIP call the device takes plus the local session."""
    if settings.llm.slots:
        return settings.llm.slots
    return 1 + (settings.sip.max_calls if settings.sip.enabled else 0)


def llm_worker_threads(settings: Settings) -> int:
    """Threads that hand the LLM's replies to the sessions: one per session that can be in a turn
    at once (every SIP call and the local session) and one for a prefill, so every reply reaches the
    engine's queue, where it is batched or waits for a slot."""
    return settings.sip.max_calls + 2


def tts_engine(settings: Settings, bundle: Bundle) -> TtsEngine:
    from engines.tts import create_tts

    return create_tts(bundle, settings.tts)


def echo_gate(settings: Settings, *, echo_cancelled: bool) -> EchoGate:
    """What the VAD hears while a reply plays: with the echo cancelled, the normal threshold (unless
    ``echo_gate.threshold_while_playing`` says otherwise); without, the raised one."""
    return EchoGate.of(settings.vad, settings.echo_gate, echo_cancelled=echo_cancelled)


def cancels_echo(settings: Settings, *, kind: SessionKind, speaker: bool) -> bool:
    """Whether a session of ``kind`` ("microphone" or "sip") runs the echo canceller:
    ``audio.echo_cancellation`` auto means the local microphone when a speaker plays the replies."""
    mode = settings.audio.echo_cancellation
    if mode == "auto":
        return kind == SessionKind.MICROPHONE and speaker
    return mode == "on"


def echo_canceller(settings: Settings, *, microphone: bool) -> EchoCanceller | None:
    """The canceller when a session may use it: with ``audio.echo_cancellation`` on, always (its load
    names a missing runtime); auto, when the daemon has a ``microphone``, replies may go to a speaker
    and the runtime loads here (else a warning, and the raised threshold); off, never."""
    audio = settings.audio
    if audio.echo_cancellation == "off":
        return None
    if audio.echo_cancellation == "auto" and (not microphone or audio.output == "none"):
        return None
    from engines.aec import create_canceller, unavailable_reason

    why = unavailable_reason() if audio.echo_cancellation == "auto" else None
    if why is not None:  # auto: a kiosk that cannot cancel its echo still runs, as before it could
        log.warning("echo cancellation is off: %s; replies are protected by the raised VAD threshold", why)
        return None

    return create_canceller(settings.aec)


def session_config(settings: Settings, *, echo_cancelled: bool = False) -> SessionConfig:
    """The endpointer, echo gate, turn and history settings of a session (``echo_cancelled``: its
    microphone runs through the echo canceller)."""
    return SessionConfig(
        endpointer=settings.endpointer,
        echo=echo_gate(settings, echo_cancelled=echo_cancelled),
        turn=TurnConfig(replies=settings.conversation, speech=settings.tts, grounding=grounding_of(settings)),
        partials=settings.partials,
        conversation=settings.conversation,
        call=settings.call,
        transfer_domain=settings.sip.transfer_domain(),
        overlap=settings.overlap,
        wake=settings.wake,
    )


def grounding_of(settings: Settings) -> Grounding | None:
    """``agent.grounding`` for turns without tools (with tools, the tool box applies it)."""
    agent = settings.agent
    if not agent.grounding:
        return None
    allowed = (*agent.allowed_figures, agent.site_name, agent.device_id)
    return Grounding(allowed=tuple(a for a in allowed if a), not_known_reply=agent.not_known_reply)


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


def noise_suppressor(settings: Settings, bundle: Bundle) -> Denoiser | None:
    """The suppressor ``denoise.engine`` names, unloaded; None for none, and None with a warning where
    its library does not load on this machine (the daemon runs on without it)."""
    from engines.denoise import create_denoiser, missing_artifacts, unavailable_reason

    engine = settings.denoise.engine
    why = None if missing_artifacts(bundle, engine) else unavailable_reason(bundle, engine)
    if why is not None:
        log.warning("noise suppression is off: denoise.engine = %r, but %s", engine, why)
        return None
    return create_denoiser(bundle, settings.denoise)


def wake_word(settings: Settings, bundle: Bundle) -> WakeWordEngine | None:
    """The wake word when ``wake.activation`` asks for one, unloaded; None otherwise, and None with a
    warning where its library does not load on this machine (then any speech begins a turn)."""
    if settings.wake.activation != ActivationMode.WAKE_WORD:
        return None
    from engines.wake import create_wake_word, missing_artifacts, unavailable_reason

    why = None if missing_artifacts(bundle, settings.wake.model) else unavailable_reason(bundle)
    if why is not None:
        log.warning(
            "the wake word is off: wake.activation = 'wake_word', but %s; any speech begins a turn", why
        )
        return None
    return create_wake_word(bundle, settings.wake)


def turn_detector(settings: Settings, bundle: Bundle) -> TurnDetector | None:
    """Smart Turn when ``endpointer.mode`` asks for it; None in silence mode (no file needed)."""
    if settings.endpointer.mode != EndpointerMode.SMART_TURN:
        return None
    from engines.turn import create_turn_detector

    return create_turn_detector(bundle, threads=1)


def build_engines(settings: Settings, bundle: Bundle, *, microphone: bool = False) -> SessionEngines:
    """The engines, unloaded, each with its worker thread (``microphone``: the daemon has a local
    microphone, whose session may need the echo canceller). Raises the factories' errors
    (engines.errors.BackendUnavailable / ModelFileError / BundleError) for a backend or model that
    is not there."""
    return SessionEngines.create(
        vad=vad_engine(settings, bundle),
        asr=asr_engine(settings, bundle),
        llm=llm_engine(settings, bundle),
        tts=tts_engine(settings, bundle),
        turn=turn_detector(settings, bundle),
        partial_asr=partial_asr_engine(settings, bundle),
        llm_threads=llm_worker_threads(settings),
        tools=tool_box(settings),
        aec=echo_canceller(settings, microphone=microphone),
        denoise=noise_suppressor(settings, bundle),
        wake=wake_word(settings, bundle),
        bundle_version=version_of(bundle.root) or "",
    )


def partial_asr_engine(settings: Settings, bundle: Bundle) -> AsrEngine | None:
    """A second Whisper for the partial transcripts when ``partials.partial_model`` names another model;
    None when partials are off or use the main one."""
    model = settings.partials.separate_model(settings.asr.model)
    return None if model is None else asr_engine(settings, bundle, model=model)


async def load_engines(engines: SessionEngines, *, one_at_a_time: bool = False) -> dict[str, float]:
    """Load and warm every engine on their own threads (in parallel unless ``one_at_a_time``);
    seconds per engine."""
    seconds = await engines.load(one_at_a_time=one_at_a_time)
    log.info("engines loaded: %s", ", ".join(f"{name} {value:.2f} s" for name, value in seconds.items()))
    return seconds
