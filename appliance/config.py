"""One settings schema for the appliance: TOML file, then environment variables on top.

Environment variables use the prefix ``APPLIANCE_`` and ``__`` between levels, e.g.
``APPLIANCE_LLM__MODEL=qwen`` or ``APPLIANCE_BUNDLE__DIR=/var/lib/appliance/bundle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from engines.files import TOMLDecodeError, loads_toml

ENV_PREFIX = "APPLIANCE_"
DEFAULT_CONFIG_NAME = "default.toml"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class BundleConfig(Section):
    dir: Path = Field(Path("~/.cache/appliance/bundle"), description="Engine bundle folder")
    verify_on_start: bool = Field(
        True,
        description="re-hash every bundle file when the daemon starts (false: presence and sizes only, "
        "as the other commands always do; `appliance bundle verify` re-hashes on demand)",
    )

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
    echo_cancellation: Literal["auto", "on", "off"] = Field(
        "auto",
        description="cancel the appliance's own voice from the microphone (WebRTC AEC3): auto = for the "
        "local microphone when a speaker plays the replies, not for SIP calls (a phone cancels its own "
        "echo); on = every session, SIP calls too; off = none (vad.threshold_while_playing and "
        "vad.gate_while_playing then keep the reply from interrupting itself)",
    )
    echo_delay_ms: float = Field(
        0.0,
        ge=0.0,
        le=1000.0,
        description="from a sample's write to the speaker until the microphone hears it (output buffer, "
        "air, input buffer): measure it with `appliance calibrate`, which writes it here; 0 leaves the "
        "whole delay to the canceller's own estimate",
    )
    echo_noise_suppression: bool = Field(False, description="WebRTC noise suppression after the canceller")
    echo_high_pass: bool = Field(True, description="WebRTC high-pass filter (removes hum and DC)")


# Without echo cancellation the appliance's own voice reaches the microphone: only speech louder than
# the reply's echo should interrupt it (README: The streaming daemon, echo).
RAISED_THRESHOLD = 0.85


class VadConfig(Section):
    backend: Literal["onnxruntime", "torch"] = "onnxruntime"
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="torch backend only; onnxruntime runs on the CPU"
    )
    threshold: float = Field(0.5, gt=0.0, lt=1.0)
    threshold_while_playing: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="while a reply plays; unset: vad.threshold where echo cancellation runs, "
        f"{RAISED_THRESHOLD} elsewhere (without it the microphone hears the reply)",
    )
    gate_while_playing: bool = False
    threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="onnxruntime: intra-op threads (unset = 1); torch: its process-wide thread count "
        "(unset = left as it is; 1 is fastest for this tiny model on a busy CPU)",
    )


class EndpointerConfig(Section):
    mode: Literal["silence", "smart_turn"] = Field(
        "smart_turn",
        description="silence: a turn ends after end_silence_ms of silence; smart_turn: after "
        "turn_check_ms the Smart Turn model judges how likely the utterance is finished: sure "
        "(turn_complete_threshold) ends it at once, sure it is not (below turn_incomplete_threshold) "
        "waits incomplete_silence_ms, unsure waits end_silence_ms",
    )
    min_speech_ms: int = Field(96, ge=0, le=2000)
    end_silence_ms: int = Field(
        500,
        ge=64,
        le=5000,
        description="silence mode; smart_turn when the model is unsure (or fails)",
    )
    turn_check_ms: int = Field(
        160, ge=32, le=2000, description="smart_turn: silence before the model is asked"
    )
    incomplete_silence_ms: int = Field(
        1000, ge=200, le=10000, description="smart_turn: silence that ends a turn the model judged unfinished"
    )
    turn_complete_threshold: float = Field(
        0.9, gt=0.0, lt=1.0, description="smart_turn: a probability at or above it ends the turn at once"
    )
    turn_incomplete_threshold: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="smart_turn: below it the turn waits incomplete_silence_ms; in between, end_silence_ms",
    )
    turn_recheck_ms: int = Field(
        0,
        ge=0,
        le=2000,
        description="smart_turn: ask the model again this often while a pause lasts; 0: once",
    )
    judge_words: bool = Field(
        True,
        description="smart_turn: the language model that answers also judges from the words whether the "
        "person has finished, read from the logits it computes for the reply anyway (llama.cpp with the "
        "model's own chat template and no other call's reply running; otherwise the sound decides alone)",
    )
    words_complete_threshold: float = Field(
        0.35,
        gt=0.0,
        lt=1.0,
        description="judge_words: words at or above it end the turn (so does the sound at or above "
        "turn_complete_threshold, unless the words say unfinished)",
    )
    words_incomplete_threshold: float = Field(
        0.02,
        gt=0.0,
        lt=1.0,
        description="judge_words: words below it keep the turn open for incomplete_silence_ms, "
        "whatever the sound says",
    )
    words_unsure_silence_ms: int = Field(
        1000,
        ge=64,
        le=10000,
        description="judge_words: silence that ends a turn when neither the words nor the sound is sure",
    )
    words_wait_ms: int = Field(
        1000,
        ge=0,
        le=2000,
        description="judge_words: how long a finished-sounding pause waits for the words' verdict",
    )
    pre_roll_ms: int = Field(256, ge=0, le=2000)
    max_utterance_s: float = Field(20.0, gt=1.0, le=60.0)

    @model_validator(mode="after")
    def _check_order(self) -> EndpointerConfig:
        if self.incomplete_silence_ms <= self.turn_check_ms:
            raise ValueError(
                f"incomplete_silence_ms ({self.incomplete_silence_ms}) must be longer than turn_check_ms "
                f"({self.turn_check_ms}): the model is asked before the long silence ends the turn"
            )
        for judge in ("turn", "words"):
            low, high = (
                getattr(self, f"{judge}_incomplete_threshold"),
                getattr(self, f"{judge}_complete_threshold"),
            )
            if low > high:
                raise ValueError(
                    f"{judge}_incomplete_threshold ({low}) must not be above {judge}_complete_threshold ({high})"
                )
        return self


class AsrConfig(Section):
    # tiny.en: WER 11.1% vs 12.6% (microphone) and 13.1% vs 16.2% (call path), 0.71x the latency of
    # base on the English test recordings (bench/reference/asr-models.json); base is multilingual.
    model: str = Field(
        "whisper-tiny-en",
        min_length=1,
        description="Whisper model in the bundle (asr/<model>/onnx): whisper-tiny-en (English) or whisper-base",
    )
    backend: Literal["onnxruntime", "tensorrt"] = "onnxruntime"
    device: Literal["cpu", "cuda"] = "cpu"
    precision: Literal["fp32", "fp16", "int8"] = "int8"
    language: str = Field("en", min_length=2, max_length=3)
    # Encode the audio plus 5 s instead of a 30 s window (full-window retry on degenerate text):
    # 0.21x faster-whisper's latency, WER +0.5 points, on the test recordings (bench/asr.py).
    encode_real_length: bool = True
    threads: int = Field(2, ge=1, le=64)
    # 600: turn latency p50 0.83x / p95 0.87x of partials off, same transcripts (README, partials).
    partial_interval_ms: int = Field(
        600,
        ge=0,
        le=10000,
        description="while a person speaks, transcribe what was said so far after each this much new "
        "speech (0: off); the LLM pre-evaluates the words two partials agree on (llm.prefill)",
    )
    partial_model: str = Field(
        "", description='Whisper model for the partial transcripts ("": asr.model), e.g. whisper-tiny-en'
    )

    @property
    def separate_partial_model(self) -> str | None:
        """The model of a second Whisper engine for the partials, when they run on another model."""
        if self.partial_interval_ms == 0 or self.partial_model in ("", self.model):
            return None
        return self.partial_model


class LlmConfig(Section):
    model: str = Field(
        "qwen-1.5b",
        min_length=1,
        description="GGUF in the bundle (llm/<model>): gemma-270m, qwen-1.5b or quantized",
    )
    gpu_layers: int = Field(0, ge=-1, description="-1 offloads all layers to the GPU")
    context_tokens: int = Field(2048, ge=256, le=131072)
    max_reply_tokens: int = Field(96, ge=1, le=4096)
    temperature: float = Field(0.2, ge=0.0, le=2.0)
    threads: int = Field(2, ge=1, le=64)
    stop: tuple[str, ...] = ("\n\n",)
    prefill: bool = Field(
        True, description="evaluate the stable words of partial transcripts before the person stops speaking"
    )
    slots: int = Field(
        0,
        ge=0,
        le=64,
        description="conversations the LLM holds and answers at once, each with its own context_tokens "
        "of KV cache; 0: one per SIP call (sip.max_calls, when SIP is on) plus the local session",
    )
    max_queue: int = Field(
        0,
        ge=0,
        le=64,
        description="replies that may wait for a slot in silence; a reply that would wait behind this "
        "many says agent.busy_reply first",
    )
    backend: Literal["local", "openai"] = Field(
        "local",
        description="local: the bundle's model on this device; openai: a site server's OpenAI-compatible "
        "API at llm.server_url (llama_cpp.server, llama-server, vLLM)",
    )
    server_url: str = Field("", description='openai: the API\'s base, "http://10.20.0.5:8000/v1"')
    server_model: str = Field("", description="openai: the model name the server knows; empty: its own")
    allowed_hosts: tuple[str, ...] = Field(
        (), description="openai: the server's host (name, address or network); nothing else is reached"
    )
    allow_public_server: bool = Field(
        False, description="openai: allow a server outside the private address ranges"
    )
    server_api_key_file: Path | None = Field(None, description="openai: a file holding the server's API key")
    server_connect_timeout_s: float = Field(2.0, gt=0.0, le=60.0)
    server_first_token_timeout_s: float = Field(
        8.0, gt=0.0, le=300.0, description="openai: the reply's first piece must arrive within this"
    )
    server_idle_timeout_s: float = Field(8.0, gt=0.0, le=300.0, description="openai: and each later one")
    server_fallback: Literal["local", "none"] = Field(
        "local",
        description="openai: local loads the bundle's model too and answers with it when the server cannot",
    )
    server_retry_s: float = Field(
        30.0, ge=0.0, le=3600.0, description="openai: after a failure, the local model answers this long"
    )


class TtsConfig(Section):
    voice: str = "en_US-joe-medium"
    length_scale: float = Field(1.0, gt=0.2, le=3.0)
    first_clause_words: int = Field(4, ge=1, le=20)
    threads: int = Field(2, ge=1, le=64, description="ONNX Runtime threads for Piper")


class ToolParameterConfig(Section):
    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str = ""
    enum: tuple[str, ...] = ()
    required: bool = True


class ToolConfig(Section):
    """A tool the model may call (``[[agent.tools]]``): ``facts`` searches a local file, ``device``
    answers about the appliance itself, ``http`` asks a service on the site's LAN."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="what the model calls it")
    kind: Literal["facts", "device", "http"]
    description: str = Field(min_length=1, max_length=400, description="what the model is told it does")
    spoken_name: str = Field("", description='how a failure names it: "the maintenance system"')
    file: Path | None = Field(None, description="facts: the Markdown or question-and-answer file")
    url: str = Field("", description="http: URL template, {argument} replaced (percent-encoded)")
    method: Literal["GET", "POST"] = "GET"
    parameters: dict[str, ToolParameterConfig] = Field(default_factory=dict, description="http arguments")
    keep: tuple[str, ...] = Field((), description="http: fields of a JSON answer to keep (a.b for nested)")
    timeout_s: float | None = Field(None, gt=0, le=60, description="empty: agent.tool_timeout_s")

    @model_validator(mode="after")
    def _check_kind(self) -> ToolConfig:
        if self.kind == "facts" and self.file is None:
            raise ValueError(f"tool {self.name}: a facts tool needs file = the facts file's path")
        if self.kind == "http" and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"tool {self.name}: an http tool needs url = 'http://host:port/path'")
        if self.kind != "http" and self.parameters:
            raise ValueError(f"tool {self.name}: only http tools take parameters (facts takes the question)")
        return self

    @field_validator("file")
    @classmethod
    def _expand_file(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()


class AgentConfig(Section):
    site_name: str = "Demo site"
    device_id: str = "appliance-dev"
    persona: str = Field(
        "You are a helpful voice assistant on a device at {site_name}. {abilities} "
        "Answer in one or two short spoken sentences, without lists or markdown.",
        description="{site_name}, {device_id}; {abilities}: what the configured tools let it do, and not",
    )
    fallback_reply: str = "Sorry, something went wrong. Please say that again."
    busy_reply: str = Field(
        "One moment, please.", description="said first when every LLM slot is busy (llm.max_queue)"
    )
    tools: tuple[ToolConfig, ...] = Field((), description="[[agent.tools]] the model may call")
    allowed_hosts: tuple[str, ...] = Field(
        (), description="LAN hosts (names, addresses or networks) http tools may reach; nothing else"
    )
    tool_timeout_s: float = Field(3.0, gt=0, le=60, description="a tool that takes longer is given up")
    max_tool_calls: int = Field(2, ge=1, le=8, description="tool calls in one turn at most")
    tool_preamble: str = Field(
        "Let me check that.",
        description="said at once when the model starts a tool call (before it names the tool)",
    )
    tool_failed_reply: str = Field(
        "Sorry, I could not reach {tool} just now.",
        description="said when a tool fails ({tool}: its spoken_name)",
    )
    tool_result_chars: int = Field(1200, ge=100, le=20000, description="a tool's answer is cut to this")
    tool_misunderstood_reply: str = Field(
        "Sorry, I could not work out how to look that up.",
        description="said when the model's tool call is malformed, unknown or over agent.max_tool_calls",
    )
    max_history_messages: int = Field(16, ge=2, le=256, description="conversation kept per session")


def _ip_address(value: str) -> str:
    """A listening or advertised address must be a number: the device resolves no names."""
    import ipaddress

    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address (this device looks up no names): use one of its own "
            "addresses, 127.0.0.1, or 0.0.0.0 for every interface"
        ) from None
    return value


class SipConfig(Section):
    enabled: bool = False
    bind_host: str = "127.0.0.1"
    advertise_host: str | None = Field(
        None, description="address put in Contact and SDP; needed when bind_host is 0.0.0.0"
    )
    port: int = Field(5060, ge=0, le=65535, description="UDP port for SIP; 0 picks a free one")
    max_calls: int = Field(2, ge=1, le=64, description="more calls at once are refused (sip.full_status)")
    full_status: Literal[486, 503] = Field(
        503,
        description="the answer to a call over max_calls: 503 Service Unavailable with Retry-After (a SIP "
        "proxy then tries another device), or 486 Busy Here (the caller hears busy)",
    )
    retry_after_s: int = Field(5, ge=1, le=3600, description="Retry-After of a 503 (device full)")
    allow_from: tuple[str, ...] = Field(("127.0.0.1/32",), description="peer networks; others get 403")
    rtp_port_min: int = Field(40000, ge=1024, le=65535)
    rtp_port_max: int = Field(40100, ge=1024, le=65535)
    rtp_timeout_s: float = Field(30.0, gt=0.0, le=3600.0, description="a call with no RTP this long ends")
    answer_delay_s: float = Field(0.0, ge=0.0, le=30.0, description="ringing time before answering")
    t1_ms: int = Field(
        500,
        ge=50,
        le=2000,
        description="RFC 3261 timer T1, the round-trip estimate: answers are repeated from T1 on, and a "
        "call whose 200 OK is never ACKed ends after 64*T1 (32 s at 500 ms), freeing its slot; lower it "
        "only where the phone system is on the same LAN",
    )
    codecs: tuple[Literal["PCMU", "PCMA"], ...] = Field(("PCMU", "PCMA"), min_length=1)
    jitter_depth_packets: int = Field(3, ge=0, le=25, description="reordering allowance, 20 ms packets")
    rtp_latch: bool = Field(
        True,
        description="take media only from the first port of the caller's host that sends it (symmetric RTP)",
    )
    tcp: bool = Field(True, description="also accept SIP over TCP on the same port")
    tcp_idle_timeout_s: float = Field(
        120.0, gt=0.0, le=3600.0, description="a TCP connection with no data this long is closed"
    )
    tcp_message_timeout_s: float = Field(
        10.0, gt=0.0, le=300.0, description="a message begun on TCP must be complete within this"
    )
    tcp_max_per_source: int = Field(8, ge=1, le=1024, description="TCP connections at once from one address")
    user_agent: str = "voice-appliance"

    @field_validator("bind_host")
    @classmethod
    def _bind_is_address(cls, value: str) -> str:
        return _ip_address(value)

    @field_validator("advertise_host")
    @classmethod
    def _advertised(cls, value: str | None, info: Any) -> str | None:
        if value is None and info.data.get("bind_host") in ("0.0.0.0", "::"):
            raise ValueError("set sip.advertise_host to the address callers reach when bind_host is 0.0.0.0")
        return None if value is None else _ip_address(value)

    @field_validator("allow_from")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import ipaddress

        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as err:
                raise ValueError(f"{entry!r} is not an address or network like 10.0.0.0/8") from err
        return value

    @field_validator("rtp_port_max")
    @classmethod
    def _rtp_range(cls, value: int, info: Any) -> int:
        low = info.data.get("rtp_port_min")
        if low is not None and value < low + 1:
            raise ValueError(f"must be above rtp_port_min ({low}): each call needs an even port")
        return value


class AdminConfig(Section):
    enabled: bool = False
    bind_host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    users_file: Path = Field(Path("/var/lib/appliance/admin-users"), description="`appliance admin passwd`")
    password_file: Path = Field(
        Path("/var/lib/appliance/admin-password"), description="the provisioned password of user 'admin'"
    )
    session_ttl_s: float = Field(28800.0, ge=60.0, le=604800.0, description="login lifetime")
    login_max_failures: int = Field(5, ge=1, le=1000, description="per client address and per user name")
    login_window_s: float = Field(300.0, ge=1.0, le=86400.0)
    cookie_secure: bool = Field(False, description="send the cookie over HTTPS only (behind a TLS proxy)")
    metrics_public: bool = Field(False, description="serve /metrics without a login (for a scraper)")
    metrics_token_file: Path | None = Field(
        None,
        description="a file holding a token (16+ characters) a scraper sends as 'Authorization: Bearer "
        "TOKEN' to read /metrics without a login (Prometheus: authorization.credentials_file)",
    )
    request_timeout_s: float = Field(
        10.0,
        gt=0.0,
        le=300.0,
        validation_alias=AliasChoices("request_timeout_s", "header_timeout_s"),  # its name until 2026-12
        description="a request, header fields and body, must arrive within this, or the connection closes",
    )
    max_connections: int = Field(64, ge=4, le=4096, description="more connections at once get 503")
    max_connections_per_client: int = Field(
        8,
        ge=1,
        le=4096,
        description="connections one address may hold at once (a trusted proxy excepted); more are closed",
    )
    trusted_proxies: tuple[str, ...] = Field(
        (),
        description="addresses of a TLS proxy in front whose X-Forwarded-For is believed; "
        "none by default, so a forged header cannot dodge the login limit",
    )
    refresh_s: float = Field(2.0, ge=0.5, le=60.0, description="dashboard refresh interval")

    @field_validator("bind_host")
    @classmethod
    def _bind_is_address(cls, value: str) -> str:
        return _ip_address(value)

    @field_validator("users_file", "password_file")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


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
    updates: dict[str, Section] = {}
    for name, values in sections.items():
        section = getattr(settings, name)
        try:
            updates[name] = type(section).model_validate({**section.model_dump(), **values})
        except ValidationError as err:
            problems = [ConfigProblem(f"{name}.{p.key}", p.message, p.value) for p in _problems(err)]
            raise ConfigError("command-line options", problems) from err
    return settings.model_copy(update=updates)


def load_settings(path: Path | None = None) -> Settings:
    """Load the TOML at ``path`` (the shipped default when None) with environment overrides."""
    source = str(path) if path else f"<default {DEFAULT_CONFIG_NAME}>"
    data = _read_toml(path) if path else loads_toml(default_config_text())
    try:
        return Settings(**data)
    except ValidationError as err:
        raise ConfigError(source, _problems(err)) from err
