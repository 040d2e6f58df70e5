"""The admin API's request and response bodies (they are also its OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from appliance.grounding import WithheldWhy
from appliance.sip.labels import RegistrationState
from appliance.trace.labels import (
    EndedBy,
    OpenedBy,
    OverlapKind,
    SessionKind,
    SessionState,
    TurnOutcome,
    WordsNotExpected,
)

Role = Literal["viewer", "admin"]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(Body):
    error: str = Field(description="stable error code, e.g. not_authenticated, csrf_failed")
    message: str = Field(description="what went wrong and how to fix it")
    problems: list[dict[str, str]] | None = Field(
        None, description='invalid_config: each problem as {"key": "section.key", "message": ...}'
    )


class Health(Body):
    status: Literal["ok"] = "ok"
    uptime_s: float


class EngineState(Body):
    name: str = Field(description="vad, asr, llm or tts")
    backend: str = ""
    model: str = ""
    runtime_version: str | None = None
    loaded: bool = False
    warm: bool = False
    load_s: float | None = None
    error: str | None = None


class LlmLoad(Body):
    slots: int = Field(description="conversations the LLM answers at once (llm.slots)")
    answering: int = Field(description="slots generating a reply now")
    waiting: int = Field(description="replies waiting for a slot")
    max_queue: int = Field(description="replies that may wait silently (llm.max_queue)")
    evictions: int = Field(0, description="conversations whose cache was given to another one")
    mean_batch: float | None = Field(None, description="replies per decode step since the start")


class Readiness(Body):
    ready: bool
    engines: list[EngineState]
    waiting_for: list[str] = Field(description="engines not yet loaded and warm")


class GpuStats(Body):
    name: str
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None


class HostStats(Body):
    cpu_count: int
    cpu_percent: float
    load_avg_1m: float
    memory_total_bytes: int
    memory_used_bytes: int
    memory_percent: float
    disk_path: str
    disk_total_bytes: int
    disk_used_bytes: int
    disk_percent: float
    temperatures_c: dict[str, float] = Field(default_factory=dict)
    gpus: list[GpuStats] = Field(default_factory=list)
    gpu_source: str | None = Field(None, description="nvidia-smi, tegrastats, or None without a GPU")


class ArtifactSummary(Body):
    name: str
    kind: str
    size_bytes: int
    sha256_prefix: str
    source: dict[str, str] = Field(default_factory=dict)


class BundleSummary(Body):
    path: str
    version: str | None = Field(None, description="the version opened, where bundle.dir keeps versions")
    label: str = ""
    rolled_back_from: str | None = Field(
        None, description="the version that failed to load at this start, rolled back from"
    )
    artifacts: list[ArtifactSummary] = Field(default_factory=list)
    total_bytes: int = 0
    meta: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class SipRegistrationView(Body):
    state: RegistrationState
    detail: str = Field("", description="why it fails, or when it is renewed")
    registrar: str
    user: str
    since: float | None = Field(None, description="Unix time of the last change of state")
    expires_s: int | None = Field(None, description="the lifetime the registrar granted")
    last_register_ms: float | None = Field(None, description="the last REGISTER, a challenge included")
    renewals: int = 0
    failures: int = 0
    auth: str = Field(
        "", description='how the registrar was answered: "digest SHA-256", "digest MD5", "none"'
    )


class StatusReport(Body):
    version: str
    site_name: str
    device_id: str
    started_at: float = Field(description="Unix time the daemon started")
    uptime_s: float
    ready: bool
    engines: list[EngineState]
    runtimes: dict[str, str | None] = Field(description="installed runtime package versions")
    bundle: BundleSummary
    host: HostStats
    notice: str | None = Field(None, description="what the operator must know, e.g. a configuration fallback")
    turns_not_stored: int = Field(0, description="turns the trace store could not keep since the start")
    llm: LlmLoad | None = Field(None, description="the LLM's slots and queue (None before it is loaded)")
    sip_registration: SipRegistrationView | None = Field(
        None, description="the extension's registration with the site's phone system (sip.registrar)"
    )
    sip_events: dict[str, int] | None = Field(
        None,
        description="what the SIP server refused or dropped since the start, by kind (malformed, "
        "rejected, forbidden, busy, internal_errors, media_dropped, keys_refused, srtp_rejected, "
        "tls_failed, tls_failed_incoming); None without SIP",
    )
    wake_words_heard: int = Field(
        0, description="wake words heard since the start by every session, whether a turn followed or not"
    )
    certificate: str | None = Field(
        None, description='the page\'s TLS certificate fingerprint ("sha256:AB:..."); None over plain HTTP'
    )


class LiveSession(Body):
    session_id: str
    kind: SessionKind = Field(description="microphone, sip, file or demo")
    peer: str = ""
    state: SessionState = Field(
        SessionState.IDLE, description="idle, listening, thinking, speaking, or waiting for the wake word"
    )
    heard: str = Field(
        "", description="partial transcript of what the person is saying now (partials.partial_interval_ms)"
    )
    started_at: float
    turns: int = 0
    wakes: int = Field(0, description="wake words heard in this session (wake.activation = wake_word)")


class WithheldClause(Body):
    clause: str = Field(description="the clause the model wrote")
    why: WithheldWhy = Field(
        description="figure: it states a figure no source gave; off_subject: a source's figure about "
        "something the person did not ask about; internal: it repeats an instruction"
    )
    figures: list[str] = Field(default_factory=list, description="the figures no source gave")


class OverlapHeard(Body):
    kind: OverlapKind = Field(
        description="backchannel: the reply paused and went on; stop_word: it stopped and nothing was "
        "answered; interruption: it stopped and what was said was the next turn"
    )
    heard: str = Field(description="the words of the overlap (empty: a sound, or decided by its length)")
    heard_logprob: float | None = Field(
        None, description="how sure Whisper was of those words (mean token log-probability; lower: less)"
    )
    at_s: float = Field(description="seconds of the reply heard when the person began")
    voiced_ms: int = Field(description="voiced time of the overlap when it was decided")
    silenced_ms: float = Field(description="from the first voiced frame to the reply's silence")
    decided_ms: float = Field(
        description="from the first voiced frame to the decision (a backchannel's pause)"
    )
    by_linear_ear: bool = Field(
        False,
        description="behind the echo canceller: the reply paused for a voice heard in the linear canceller's "
        "output alone (its suppressor had turned it down)",
    )


class TurnView(Body):
    turn_id: str
    session_id: str
    wall_time: float
    transcript: str
    reply: str
    played_reply: str
    cancelled: bool
    error: str | None
    outcome: TurnOutcome = Field(
        description="how the turn ended: answered, interrupted (the person spoke over the reply), hangup "
        "(the call ended during the reply), stopped (the daemon stopped during it), error"
    )
    speculative: bool
    audio_s: float
    reply_audio_s: float
    llm_tokens: int
    stages_ms: dict[str, float | None]
    timeline_s: dict[str, float | None] = Field(description="each timestamp relative to speech start")
    turn_latency_ms: float | None
    over_budget: bool
    endpoint_wait_ms: float | None = Field(description="end of speech -> end of turn decided")
    endpoint_by: EndedBy | None = Field(
        None,
        description="what ended the turn: silence, smart_turn (heard as finished), fused (sound and words), "
        "text (the words), incomplete_silence (the long silence after an unfinished verdict), max_length, "
        "stream_end; on a call keypad, operator_key, silence_prompt, transfer_failed, greeting; null in older records",
    )
    turn_checks: int = Field(description="times the end-of-turn model was asked during the utterance")
    turn_complete_p: float | None = Field(
        None, description="the sound's verdict (Smart Turn) on the pause that ended the turn"
    )
    words_complete_p: float | None = Field(
        None,
        description="the words' verdict: the reply LLM's P(the words end the message) on that pause "
        "(endpointer.judge_words); None when the words were not judged",
    )
    words_not_expected: WordsNotExpected | None = Field(
        None,
        description="why the words did not judge that pause (the sound decided alone): off, model_cannot "
        "(no chat template, site server), llm_busy (answering another call), no_pause; null when they could",
    )
    turn_incomplete: int = Field(description="... and did not hear it as finished")
    facts_given: list[str] = Field(
        default_factory=list, description="the site facts' sections the question was given (their titles)"
    )
    heard_as: list[str] = Field(
        default_factory=list,
        description='words of the transcript read as the site\'s by their sound ("L -> Elm", agent.site_words_by_sound)',
    )
    withheld: list[WithheldClause] = Field(
        default_factory=list, description="clauses of the reply not spoken (agent.grounding), and why"
    )
    declined: bool = Field(False, description="the reply said agent.not_known_reply")
    overlaps: list[OverlapHeard] = Field(
        default_factory=list, description="speech over the reply, and what it was taken for"
    )
    opened_by: OpenedBy | None = Field(
        None,
        description="what let the speech begin the turn: always, wake_word, follow_up (after a reply), "
        "answering (over a turn still running); null in older records",
    )
    partials: int = Field(0, description="partial transcripts made while the person spoke")
    prefill_reused: int = Field(0, description="prompt tokens the LLM had evaluated before the end of speech")
    llm_evaluated_tokens: int = Field(
        0, description="prompt tokens the LLM evaluated after the end of speech"
    )
    llm_backend: str = Field(
        "", description='who answered with llm.backend = "openai": site server, or local model (and why)'
    )


class StageLatency(Body):
    stage: str
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    budget_ms: float | None = None
    p95_over_budget: bool | None = None


class VersionQualityView(Body):
    version: str = Field(description='the bundle version that answered ("" for an unversioned bundle)')
    turns: int = Field(description="turns with words heard")
    avg_logprob: float | None = Field(
        None, description="Whisper's mean average log probability (under -1: unsure)"
    )
    no_speech_p: float | None = Field(None, description="Whisper's mean no-speech probability")
    signals: dict[str, int] = Field(
        description="turns showing each quality signal: unsure, repeated, barge_in, tool_failed, fallback, empty"
    )


class LatencyReport(Body):
    turns: int = Field(description="turns looked at (newest first)")
    budget_ms: float = Field(description="turn latency budget (trace.budget_ms)")
    over_budget: int = Field(description="turns whose turn_latency exceeded the budget")
    stages: list[StageLatency]
    turn_checks: int = Field(0, description="end-of-turn model verdicts in these turns")
    turn_incomplete: int = Field(0, description="... that did not hear the utterance as finished")
    endings: dict[str, int] = Field(default_factory=dict, description="turns by what ended them")
    quality: list[VersionQualityView] = Field(
        default_factory=list, description="output quality of these turns, per bundle version, newest first"
    )


class SettingField(Body):
    key: str = Field(description="section.key, as in the file and in PUT /api/config")
    kind: Literal["integer", "number", "boolean", "string", "choice", "json"]
    description: str
    unit: str = ""
    default: Any = None
    choices: list[Any] = Field(default_factory=list)
    nullable: bool = False
    live: bool = Field(False, description="applied without a restart")
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None


class SettingsSection(Body):
    name: str
    description: str
    fields: list[SettingField]


class FactsFileView(Body):
    tool: str = Field(description="the facts tool ([[agent.tools]] name) that reads the file")
    path: str
    text: str
    sections: int = Field(description="entries the facts file holds, as the answer path reads them")
    problem: str | None = Field(None, description="why the file cannot be read, with the fix")


class FactsChange(Body):
    text: str = Field(max_length=1024 * 1024)


class FactsSaved(Body):
    path: str
    backup: str | None
    sections: int
    restart_required: bool = Field(True, description="the facts in service change at the next start")


class TryQuestion(Body):
    question: str = Field(min_length=1, max_length=300)


class TriedAnswer(Body):
    said: str
    chosen: list[Any] = Field(default_factory=list, description="the facts' sentence chosen, if any")
    declined: bool = False
    why: str | None = None
    seconds: float


class Restarting(Body):
    restarting: bool
    message: str


class ConfigView(Body):
    path: str | None = Field(description="the configuration file; None when running on the shipped default")
    writable: bool
    settings: dict[str, Any]
    environment_overrides: list[str] = Field(description="keys set by APPLIANCE_* variables (they win)")
    live_keys: list[str] = Field(description="keys applied without a restart")


class ConfigChange(Body):
    changes: dict[str, dict[str, Any]] = Field(
        description='{"section": {"key": value}}; a null value removes the key (back to the default)',
        examples=[{"llm": {"temperature": 0.3}}],
    )


class ConfigUpdate(Body):
    path: str
    changed: list[str]
    applied: list[str] = Field(description="changed keys in effect now")
    restart_required: list[str] = Field(description="changed keys that take effect after a restart")
    environment_overrides: list[str] = Field(description="changed keys an APPLIANCE_* variable overrides")


class LoginRequest(Body):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class SessionInfo(Body):
    username: str
    role: Role
    csrf_token: str = Field(description="send as the X-CSRF-Token header on POST/PUT/DELETE")
    expires_at: float
    refresh_s: float = Field(description="how often the dashboard refreshes (admin.refresh_s)")
