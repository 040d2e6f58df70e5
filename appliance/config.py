"""One settings schema for the appliance: TOML file, then environment variables on top.

Environment variables use the prefix ``APPLIANCE_`` and ``__`` between levels, e.g.
``APPLIANCE_LLM__MODEL=qwen`` or ``APPLIANCE_BUNDLE__DIR=/var/lib/appliance/bundle``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6)
    import tomli as tomllib

ENV_PREFIX = "APPLIANCE_"
DEFAULT_CONFIG_NAME = "default.toml"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class BundleConfig(Section):
    dir: Path = Field(Path("~/.cache/appliance/bundle"), description="Engine bundle folder")
    verify_on_start: bool = True

    @field_validator("dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class AudioConfig(Section):
    input: Literal["auto", "microphone", "none"] = "auto"
    output: Literal["auto", "speaker", "none"] = "auto"
    input_device: str | None = Field(None, description="sounddevice name or index; None = default")
    output_device: str | None = None
    device_sample_rate_hz: int = Field(16000, ge=8000, le=192000)
    frame_ms: Literal[32] = 32


class VadConfig(Section):
    backend: Literal["onnxruntime", "torch"] = "onnxruntime"
    threshold: float = Field(0.5, gt=0.0, lt=1.0)
    threshold_while_playing: float = Field(0.85, gt=0.0, le=1.0)
    gate_while_playing: bool = False


class EndpointerConfig(Section):
    min_speech_ms: int = Field(96, ge=0, le=2000)
    end_silence_ms: int = Field(500, ge=64, le=5000)
    pre_roll_ms: int = Field(256, ge=0, le=2000)
    max_utterance_s: float = Field(20.0, gt=1.0, le=60.0)


class AsrConfig(Section):
    backend: Literal["onnxruntime", "tensorrt"] = "onnxruntime"
    device: Literal["cpu", "cuda"] = "cpu"
    precision: Literal["fp32", "fp16", "int8"] = "int8"
    language: str = Field("en", min_length=2, max_length=3)
    encode_real_length: bool = False
    threads: int = Field(2, ge=1, le=64)


class LlmConfig(Section):
    model: Literal["gemma-270m", "qwen-1.5b"] = "qwen-1.5b"
    gpu_layers: int = Field(0, ge=-1, description="-1 offloads all layers to the GPU")
    context_tokens: int = Field(2048, ge=256, le=131072)
    max_reply_tokens: int = Field(96, ge=1, le=4096)
    temperature: float = Field(0.2, ge=0.0, le=2.0)
    threads: int = Field(2, ge=1, le=64)
    stop: tuple[str, ...] = ("\n\n",)


class TtsConfig(Section):
    voice: str = "en_US-joe-medium"
    length_scale: float = Field(1.0, gt=0.2, le=3.0)
    first_clause_words: int = Field(4, ge=1, le=20)


class AgentConfig(Section):
    site_name: str = "Demo site"
    device_id: str = "appliance-dev"
    language: str = "en"
    persona: str = (
        "You are a helpful voice assistant on a device at {site_name}. "
        "Answer in one or two short spoken sentences, without lists or markdown."
    )
    fallback_reply: str = "Sorry, something went wrong. Please say that again."


class SipConfig(Section):
    enabled: bool = False
    bind_host: str = "127.0.0.1"
    port: int = Field(5060, ge=1, le=65535)
    max_calls: int = Field(2, ge=1, le=64)
    allow_from: tuple[str, ...] = ("127.0.0.1/32",)
    rtp_port_min: int = Field(40000, ge=1024, le=65535)
    rtp_port_max: int = Field(40100, ge=1024, le=65535)
    rtp_timeout_s: float = Field(30.0, gt=0.0, le=3600.0)


class AdminConfig(Section):
    enabled: bool = False
    bind_host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)


class TraceConfig(Section):
    db_path: Path = Path("~/.local/state/appliance/turns.sqlite3")
    max_turns: int = Field(10000, ge=10, le=10_000_000)
    budget_ms: int = Field(800, ge=10, le=60000, description="turn latency budget for the admin page")

    @field_validator("db_path")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )

    bundle: BundleConfig = BundleConfig()
    audio: AudioConfig = AudioConfig()
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


def default_config_text() -> str:
    return resources.files("appliance").joinpath(DEFAULT_CONFIG_NAME).read_text(encoding="utf-8")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ConfigError(str(path), [ConfigProblem("<file>", "file not found", _MISSING)]) from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), [ConfigProblem("<file>", f"cannot read: {err}", _MISSING)]) from err
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
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


def load_settings(path: Path | None = None) -> Settings:
    """Load the TOML at ``path`` (the shipped default when None) with environment overrides."""
    source = str(path) if path else f"<default {DEFAULT_CONFIG_NAME}>"
    data = _read_toml(path) if path else tomllib.loads(default_config_text())
    try:
        return Settings(**data)
    except ValidationError as err:
        raise ConfigError(source, _problems(err)) from err
