"""One settings schema for the appliance: TOML file, then environment variables on top.

Environment variables use the prefix ``APPLIANCE_`` and ``__`` between levels, e.g.
``APPLIANCE_LLM__MODEL=qwen`` or ``APPLIANCE_BUNDLE__DIR=/var/lib/appliance/bundle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from appliance.admin.params import AdminParams
from appliance.agent.params import AgentParams
from appliance.audio.params import AudioParams
from appliance.config_moves import SettingError, moved, moved_environment, notice
from appliance.daemon.bundle_params import BundleParams
from appliance.pipeline.echo_gate import EchoGateParams
from appliance.pipeline.params import CallParams, ConversationParams, OverlapParams, PartialsParams
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


class Settings(BaseSettings):
    """Every section is one component's settings, declared next to the code that uses them."""

    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )

    bundle: BundleParams = BundleParams()
    audio: AudioParams = AudioParams()
    aec: AecParams = AecParams()
    denoise: DenoiseParams = DenoiseParams()
    wake: WakeParams = WakeParams()
    vad: VadParams = VadParams()
    echo_gate: EchoGateParams = EchoGateParams()
    endpointer: EndpointerParams = EndpointerParams()
    overlap: OverlapParams = OverlapParams()
    asr: AsrParams = AsrParams()
    partials: PartialsParams = PartialsParams()
    llm: LlmParams = LlmParams()
    llm_server: LlmServerParams = LlmServerParams()
    tts: TtsParams = TtsParams()
    agent: AgentParams = AgentParams()
    conversation: ConversationParams = ConversationParams()
    sip: SipParams = SipParams()
    call: CallParams = CallParams()
    admin: AdminParams = AdminParams()
    trace: TraceParams = TraceParams()

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """An older version's keys (the file's and the environment's, merged) read at their new places."""
        if not isinstance(data, dict):
            return data
        data, moves = moved(data)  # MovedTwice: a key set at both places
        notice(moves)
        return data

    @model_validator(mode="after")
    def _transfers_reachable(self) -> Settings:
        domain = self.sip.transfer_domain()
        for name in self.call.transfer_targets:
            if self.call.transfer_uri(name, domain) is None:
                raise SettingError(
                    "call.transfer_targets",
                    f"{name!r} is an extension but sip.registrar is not set: "
                    'give it as a SIP URI ("sip:2000@10.20.0.2") or set sip.registrar',
                )
        return self

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
        if isinstance(env_settings, EnvSettingsSource):
            env_settings.env_vars = moved_environment(env_settings.env_vars, ENV_PREFIX)
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
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, SettingError):  # the settings as a whole, blamed on one key
            problems.append(ConfigProblem(cause.key, cause.message, _MISSING))
            continue
        if item["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        problems.append(ConfigProblem(key, message, item.get("input", _MISSING)))
    return problems


def override(settings: Settings, **sections: dict[str, Any]) -> Settings:
    """``settings`` with some keys of some sections replaced (a command's ``--model``, a test's
    speed trade-off); each changed section is validated again, so a bad value raises ConfigError."""
    updates: dict[str, Params] = {}
    try:
        sections, _moves = moved(sections)  # a benchmark variant or a script of an older version
    except SettingError as err:
        raise ConfigError("command-line options", [ConfigProblem(err.key, err.message, _MISSING)]) from err
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
