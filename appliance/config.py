"""One settings schema for the appliance: TOML file, then environment variables on top.

Environment variables use the prefix ``APPLIANCE_`` and ``__`` between levels, e.g.
``APPLIANCE_LLM__MODEL=qwen`` or ``APPLIANCE_BUNDLE__DIR=/var/lib/appliance/bundle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from appliance.admin.params import AdminParams
from appliance.agent_params import AgentParams
from appliance.audio.params import AudioParams
from appliance.daemon.bundle_params import BundleParams
from appliance.pipeline.echo_gate import EchoGateParams
from appliance.pipeline.params import OverlapParams, PartialsParams, PrefillParams
from appliance.sip.params import SipParams
from appliance.trace.params import TraceParams
from engines.aec.params import AecParams
from engines.asr.params import AsrParams
from engines.denoise.params import DenoiseParams
from engines.files import TOMLDecodeError, loads_toml
from engines.llm.params import LlmParams, LlmServerParams
from engines.params import Params
from engines.tts.params import TtsParams

# The settings' own vocabularies, re-exported for readers that never import the engines (the admin page).
from engines.vad.params import EndpointerMode as EndpointerMode
from engines.vad.params import EndpointerParams, VadParams
from engines.wake.params import ActivationMode as ActivationMode
from engines.wake.params import WakeParams

ENV_PREFIX = "APPLIANCE_"


class BundleConfig(BundleParams):
    """[bundle]: appliance/daemon/bundle_params.py."""


class AudioConfig(AudioParams, AecParams):
    """[audio]: appliance/audio/params.py and the echo canceller's engines/aec/params.py."""


class DenoiseConfig(DenoiseParams):
    """``[denoise]``: noise suppression, engines/denoise/params.py."""


class WakeConfig(WakeParams):
    """``[wake]``: how a turn may begin, engines/wake/params.py."""


class VadConfig(EchoGateParams, VadParams):
    """``[vad]``: the VAD's own settings and the echo gate's."""


class EndpointerConfig(OverlapParams, EndpointerParams):
    """``[endpointer]``: the end of a turn (engines/vad/endpointer.py) and speech over a reply
    (appliance/pipeline/overlap.py)."""


class AsrConfig(PartialsParams, AsrParams):
    """``[asr]``: Whisper's settings and the partial transcripts'."""

    @property
    def separate_partial_model(self) -> str | None:
        """The model of a second Whisper engine for the partials, when they run on another model."""
        if self.partial_interval_ms == 0 or self.partial_model in ("", self.model):
            return None
        return self.partial_model


class LlmConfig(PrefillParams, LlmServerParams, LlmParams):
    """``[llm]``: the local model's settings, a site server's, the prefill, and the slots."""

    slots: int = Field(
        0,
        ge=0,
        le=64,
        description="conversations the LLM holds and answers at once, each with its own context_tokens "
        "of KV cache; 0: one per SIP call (sip.max_calls, when SIP is on) plus the local session",
    )
    backend: Literal["local", "openai"] = Field(
        "local",
        description="local: the bundle's model on this device; openai: a site server's OpenAI-compatible "
        "API at llm.server_url (llama_cpp.server, llama-server, vLLM)",
    )


TtsConfig = TtsParams


class AgentConfig(AgentParams):
    """[agent]: appliance/agent_params.py."""


class SipConfig(SipParams):
    """[sip]: appliance/sip/params.py (with the call's keys of appliance/pipeline/params.py)."""


class AdminConfig(AdminParams):
    """[admin]: appliance/admin/params.py."""


class TraceConfig(TraceParams):
    """[trace]: appliance/trace/params.py."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )

    bundle: BundleConfig = BundleConfig()
    audio: AudioConfig = AudioConfig()
    denoise: DenoiseConfig = DenoiseConfig()
    wake: WakeConfig = WakeConfig()
    vad: VadConfig = VadConfig()
    endpointer: EndpointerConfig = EndpointerConfig()
    asr: AsrConfig = AsrConfig()
    llm: LlmConfig = LlmConfig()
    tts: TtsConfig = TtsConfig()
    agent: AgentConfig = AgentConfig()
    sip: SipConfig = SipConfig()
    admin: AdminConfig = AdminConfig()
    trace: TraceConfig = TraceConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment wins over the file (passed as init values); no .env or secrets dir.
        return (env_settings, init_settings)


@dataclass(frozen=True)
class ConfigProblem:
    key: str
    message: str
    value: Any

    def __str__(self) -> str:
        shown = "" if self.value is _MISSING else f" (got {self.value!r})"
        return f"{self.key}: {self.message}{shown}"


class ConfigError(Exception):
    """A configuration file or environment that cannot be used; lists every problem."""

    def __init__(self, source: str, problems: list[ConfigProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


_MISSING = object()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ConfigError(str(path), [ConfigProblem("<file>", "file not found", _MISSING)]) from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), [ConfigProblem("<file>", f"cannot read: {err}", _MISSING)]) from err
    try:
        return loads_toml(text)
    except TOMLDecodeError as err:
        raise ConfigError(str(path), [ConfigProblem("<toml>", f"not valid TOML: {err}", _MISSING)]) from err


def _problems(err: ValidationError) -> list[ConfigProblem]:
    problems = []
    for item in err.errors():
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        problems.append(ConfigProblem(key, message, item.get("input", _MISSING)))
    return problems


def override(settings: Settings, **sections: dict[str, Any]) -> Settings:
    """``settings`` with some keys of some sections replaced (a command's ``--model``, a test's
    speed trade-off); each changed section is validated again, so a bad value raises ConfigError."""
    updates: dict[str, Params] = {}
    for name, values in sections.items():
        section = getattr(settings, name)
        try:
            updates[name] = type(section).model_validate({**section.model_dump(), **values})
        except ValidationError as err:
            problems = [ConfigProblem(f"{name}.{p.key}", p.message, p.value) for p in _problems(err)]
            raise ConfigError("command-line options", problems) from err
    return settings.model_copy(update=updates)


def load_settings(path: Path | None = None) -> Settings:
    """Load the TOML at ``path`` (every key at its default when None) with environment overrides."""
    source = str(path) if path else "<the default configuration>"
    data = _read_toml(path) if path else {}
    try:
        return Settings(**data)
    except ValidationError as err:
        raise ConfigError(source, _problems(err)) from err
