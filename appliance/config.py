"""One settings schema for the appliance: TOML file, then environment variables on top.

Environment variables use the prefix ``APPLIANCE_`` and ``__`` between levels, e.g.
``APPLIANCE_LLM__MODEL=qwen`` or ``APPLIANCE_BUNDLE__DIR=/var/lib/appliance/bundle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from appliance.audio.params import AudioParams
from appliance.pipeline.echo_gate import EchoGateParams
from appliance.pipeline.params import CallParams, HistoryParams, PartialsParams, PrefillParams, ReplyParams
from appliance.trace.params import TraceParams
from engines.aec.params import AecParams
from engines.asr.params import AsrParams
from engines.bundle_store import DEFAULT_KEEP
from engines.files import TOMLDecodeError, loads_toml
from engines.llm.params import LlmParams, LlmServerParams
from engines.params import Params, check_sentence, ms_to_s
from engines.tts.params import TtsParams
from engines.vad.endpointer import EndpointerParams
from engines.vad.params import VadParams

ENV_PREFIX = "APPLIANCE_"


class Section(Params):
    """A section of the appliance's own (not a component's)."""


class BundleConfig(Section):
    dir: Path = Field(
        Path("~/.cache/appliance/bundle"),
        description="the engine bundle, built by `python -m build_scripts bundle --out DIR`",
    )
    keep: int = Field(
        DEFAULT_KEEP,
        ge=2,
        le=20,
        description="bundle versions kept on disk; an import or a build removes the oldest beyond this "
        "(never the active one nor the previous one, the rollback's target)",
    )
    verify_on_start: bool = Field(
        True,
        description="re-hash every bundle file when the daemon starts (false: presence and sizes only, "
        "as the other commands always do; `appliance bundle verify` re-hashes on demand)",
    )

    rollback_after_crashes: int = Field(
        3,
        ge=0,
        le=4,
        description="a bundle version whose daemon ended this many times in a crash or a missed watchdog "
        "ping within crash_window_min is rolled back at the next start (0: never); under appliance.service's "
        "StartLimitBurst (5), so that systemd still starts the daemon that rolls back",
    )
    crash_window_min: float = Field(
        10.0,
        gt=0.0,
        le=1440.0,
        description="... within this many minutes of each other (see rollback_after_crashes)",
    )

    canary_max_wer_increase: float = Field(
        0.02,
        ge=0.0,
        le=1.0,
        description="appliance bundle evaluate: a candidate's WER may be at most this much (0.02: two "
        "points) above the active bundle's",
    )
    canary_max_latency_ratio: float = Field(
        1.25,
        ge=1.0,
        le=10.0,
        description="... and its engines' p95 share of a turn (or under trace.budget_ms) and each stage's "
        "p50 (speech recognition, first clause, first audio) at most this many times the active one's",
    )
    canary_max_answer_drop: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="... and the share of the facts and tool calls the set expects that its answers have at "
        "most this much (0.1: ten points) below the active one's",
    )
    canary_max_memory_ratio: float = Field(
        1.5, ge=1.0, le=10.0, description="... and its peak memory at most this many times the active one's"
    )

    @field_validator("dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class AudioConfig(AudioParams, AecParams):
    """[audio]: appliance/audio/params.py and the echo canceller's engines/aec/params.py."""


class VadConfig(EchoGateParams, VadParams):
    """``[vad]``: the VAD's own settings and the echo gate's."""


EndpointerConfig = EndpointerParams


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


class ToolParameterConfig(Section):
    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str = ""
    enum: tuple[str, ...] = ()
    required: bool = True


class ToolConfig(Section):
    """A tool the model may call (``[[agent.tools]]``): ``facts`` searches a local file, ``device``
    answers about the appliance itself, ``http`` asks a service on the site's LAN, ``end_call`` hangs
    up a phone call after the reply (the goodbye) has been played, ``transfer`` puts the caller
    through to one of ``sip.transfer_targets`` after the reply."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="what the model calls it")
    kind: Literal["facts", "device", "http", "end_call", "transfer"]
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


class AgentConfig(HistoryParams, ReplyParams):
    site_name: str = Field("Demo site", description="the site's name, as the persona says it")
    device_id: str = Field("appliance-dev", description="this device's name on the admin page and /metrics")
    persona: str = Field(
        "You are a helpful voice assistant on a device at {site_name}. {abilities} "
        "Answer in one or two short spoken sentences, without lists or markdown.",
        description="{site_name}, {device_id}; {abilities}: what the configured tools let it do, and not",
    )
    tools: tuple[ToolConfig, ...] = Field(
        (), description="the tools the model may call: facts, device, http, end_call, transfer"
    )
    allowed_hosts: tuple[str, ...] = Field(
        (), description="LAN hosts (names, addresses or networks) http tools may reach; nothing else"
    )
    tool_timeout_s: float = Field(3.0, gt=0, le=60, description="a tool that takes longer is given up")
    max_tool_calls: int = Field(2, ge=1, le=8, description="tool calls in one turn at most")
    tool_preamble: str = Field(
        "Let me check that.",
        description="said when a tool call has started and its answer has not begun after "
        "tool_preamble_after_ms",
    )
    tool_preamble_after_ms: int = Field(
        700,
        ge=0,
        le=10000,
        description="a tool call whose answer starts sooner than this says no preamble (0: always say it)",
    )
    facts_prompt_tokens: int = Field(
        800,
        ge=0,
        le=8000,
        description="the site's facts stay whole in the system prompt (evaluated once) when they take at "
        "most this many tokens, estimated at 4 characters a token; larger files give each question the "
        "facts_per_turn sections that match its words (0: always so)",
    )
    facts_per_turn: int = Field(
        2, ge=1, le=8, description="sections of a large facts file given per question"
    )
    grounding: bool = Field(
        True,
        description="check each clause of a reply before it is spoken: one stating a figure (number, time, "
        "extension, room, price) that no source gave (the site's facts, a tool's answer, the conversation, "
        "allowed_figures) is not said, and the reply ends with not_known_reply",
    )
    allowed_figures: tuple[str, ...] = Field(
        (), description='figures any reply may state besides the sources: "112", "24 hours a day"'
    )
    not_known_reply: str = Field(
        "Sorry, I don't have that information here.",
        min_length=1,
        description="said when the facts do not answer a question (the model is told to say it too)",
    )
    not_known_offer: str = Field(
        "I can put you through to {target}.",
        description="said after not_known_reply when a clause was withheld and a transfer tool can reach "
        "{target} (the first of sip.transfer_targets)",
    )
    goodbye_reply: str = Field(
        "Thank you for calling. Goodbye.", min_length=1, description="said when the model ends a call"
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

    @field_validator("not_known_reply", "goodbye_reply", "tool_preamble")
    @classmethod
    def _sentence(cls, value: str) -> str:
        return check_sentence(value)

    @field_validator("not_known_offer")
    @classmethod
    def _offer(cls, value: str) -> str:
        return check_sentence(value, ("target",))


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


class SipConfig(CallParams, Section):
    enabled: bool = Field(False, description="answer SIP calls")
    bind_host: str = Field(
        "127.0.0.1", description="the address SIP listens on (0.0.0.0: every interface, with advertise_host)"
    )
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
    rtp_port_min: int = Field(40000, ge=1024, le=65535, description="the calls' RTP ports, from this")
    rtp_port_max: int = Field(40100, ge=1024, le=65535, description="... to this")
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
    codecs: tuple[Literal["PCMU", "PCMA"], ...] = Field(
        ("PCMU", "PCMA"), min_length=1, description="offered codecs; the caller's order decides among these"
    )
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
    user_agent: str = Field("voice-appliance", description="the User-Agent and Server header")
    registrar: str = Field(
        "",
        description="register as an extension with the site's phone system at this address, IP[:port] "
        '(never a name: no lookups at run time); "" registers nowhere',
    )
    register_user: str = Field("", description="the extension's user name (the number callers dial)")
    register_auth_user: str = Field("", description="the digest authentication user, when not register_user")
    register_domain: str = Field(
        "", description="the SIP domain of the extension (default: the registrar's address)"
    )
    register_password_file: Path | None = Field(
        None, description="a file holding the extension's password, readable by the service only (mode 600)"
    )
    register_expires_s: int = Field(
        300,
        ge=30,
        le=86400,
        description="the registration's lifetime asked for; renewed at 80% of what is granted",
    )
    register_transport: Literal["udp", "tcp"] = Field(
        "udp",
        description="how the registration reaches the registrar: udp, or tcp (a connection opened to it, "
        "again whenever it was closed; the Contact then asks for calls over TCP)",
    )
    register_retry_max_s: float = Field(
        300.0,
        ge=5.0,
        le=3600.0,
        description="a failing registration is retried after 5 s, doubling up to this (a registrar's "
        "Retry-After too)",
    )
    register_min_interval_s: float = Field(
        30.0,
        ge=1.0,
        le=3600.0,
        description="REGISTER at most this often, even when the registrar grants a shorter lifetime",
    )

    @property
    def registrar_address(self) -> tuple[str, int]:
        """``registrar`` as (host, port), 5060 when it names none."""
        host, port = _split_registrar(self.registrar)
        return host, int(port) if port else 5060

    @property
    def t1_s(self) -> float:
        return ms_to_s(self.t1_ms)

    def transfer_domain(self) -> str:
        """Where an extension is reached: the extension's domain, else the registrar with its port (a
        phone told only the address would call port 5060)."""
        if self.register_domain:
            return self.register_domain
        host, port = _split_registrar(self.registrar)
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port}" if port else host

    @model_validator(mode="after")
    def _transfers(self) -> SipConfig:
        for name in self.transfer_targets:
            if self.transfer_uri(name) is None:
                raise ValueError(
                    f"transfer target {name!r} is an extension but sip.registrar is not set: "
                    f'give it as a SIP URI ("sip:2000@10.20.0.2") or set sip.registrar'
                )
        if self.operator_digit and self.operator_target not in self.transfer_targets:
            raise ValueError(
                f"sip.operator_target {self.operator_target!r} is not one of sip.transfer_targets "
                f"({', '.join(self.transfer_targets) or 'none'})"
            )
        return self

    @field_validator("registrar")
    @classmethod
    def _registrar_is_address(cls, value: str) -> str:
        if not value:
            return value
        host, port = _split_registrar(value)
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{value!r}: the port must be 1-65535")
        _ip_address(host)
        return value

    @field_validator("register_user")
    @classmethod
    def _user_with_registrar(cls, value: str, info: Any) -> str:
        if info.data.get("registrar") and not value:
            raise ValueError(
                "set the extension's user name (sip.register_user) to register with sip.registrar"
            )
        if any(c in value for c in ' <>@:;"'):
            raise ValueError(f'{value!r} is not a SIP user name (no spaces or < > @ : ; ")')
        return value

    @field_validator("register_password_file")
    @classmethod
    def _password_file(cls, value: Path | None, info: Any) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        try:
            mode = value.stat().st_mode
        except OSError as err:
            raise ValueError(f"cannot read {value}: {err.strerror}") from err
        if mode & 0o077:
            raise ValueError(f"{value} can be read by other users (mode {mode & 0o777:o}); chmod 600 it")
        return value

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


def _split_registrar(value: str) -> tuple[str, str]:
    """(host, port or "") of ``IP[:port]``; an IPv6 address has more than one colon and no port here."""
    host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return host, port


class AdminConfig(Section):
    enabled: bool = Field(False, description="serve the admin page")
    bind_host: str = Field(
        "127.0.0.1", description="the interface the admin page listens on (0.0.0.0: every interface)"
    )
    port: int = Field(8080, ge=1, le=65535, description="the admin page's TCP port")
    users_file: Path = Field(
        Path("/var/lib/appliance/admin-users"),
        description="the admin page's accounts, made with `appliance admin passwd`",
    )
    password_file: Path = Field(
        Path("/var/lib/appliance/admin-password"), description="the provisioned password of user 'admin'"
    )
    session_ttl_s: float = Field(28800.0, ge=60.0, le=604800.0, description="login lifetime")
    login_max_failures: int = Field(
        5, ge=1, le=1000, description="failed logins allowed per client address and per user name"
    )
    login_window_s: float = Field(
        300.0, ge=1.0, le=86400.0, description="the window login_max_failures counts in"
    )
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


class TraceConfig(TraceParams):
    """[trace]: appliance/trace/params.py."""


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
    """Load the TOML at ``path`` (every key at its default when None) with environment overrides."""
    source = str(path) if path else "<the default configuration>"
    data = _read_toml(path) if path else {}
    try:
        return Settings(**data)
    except ValidationError as err:
        raise ConfigError(source, _problems(err)) from err
