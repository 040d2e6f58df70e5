"""Prometheus ``/metrics``: per-stage latency histograms fed from turn traces, plus live gauges.

Each scrape first takes in the turns stored since the last one (each turn is observed once), so the
histograms count every turn the store kept even when nobody looked at the page for a while.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from appliance.admin.backend import AdminBackend
from appliance.admin.schemas import StatusReport
from appliance.admin.views import BUDGET_STAGE, turn_outcome
from appliance.grounding import WithheldWhy
from appliance.quality import signals as quality_signals
from appliance.service.loop_watch import STALL_S, current_figures
from appliance.sip.labels import RegistrationState
from appliance.trace import STAGES, TurnTrace
from appliance.trace.labels import (
    EndedBy,
    Judge,
    OpenedBy,
    OverlapKind,
    TurnCheck,
    TurnOutcome,
    WordsNotExpected,
)

# 25 ms .. 30 s: a GPU turn is ~0.15 s, a CPU turn several seconds.
LATENCY_BUCKETS_S = (
    0.025,
    0.05,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    8.0,
    13.0,
    20.0,
    30.0,
)
# Turns read from the store per scrape; more than this between two scrapes are counted from the newest.
SCRAPE_TURNS = 1000
_ENDINGS = frozenset(by.value for by in EndedBy)
_WORDS_REASONS = frozenset(why.value for why in WordsNotExpected)
_WITHHELD_REASONS = frozenset(why.value for why in WithheldWhy)
_OVERLAP_KINDS = frozenset(kind.value for kind in OverlapKind)
_OPENED_BY = frozenset(by.value for by in OpenedBy)


class _LiveGauges(Collector):
    def __init__(self, backend: AdminBackend) -> None:
        self._backend = backend

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        readiness = self._backend.readiness()
        yield GaugeMetricFamily(
            "appliance_ready", "1 when every engine is loaded and warm", value=readiness.ready
        )
        yield GaugeMetricFamily(
            "appliance_uptime_seconds", "seconds since start", value=self._backend.health().uptime_s
        )
        sessions = GaugeMetricFamily("appliance_live_sessions", "open audio sessions", labels=["kind"])
        counts: dict[str, int] = {}
        for session in self._backend.sessions():
            counts[session.kind] = counts.get(session.kind, 0) + 1
        for kind, count in sorted(counts.items()):
            sessions.add_metric([kind], count)
        yield sessions
        yield GaugeMetricFamily(
            "appliance_turns_not_stored",
            "turns the trace store could not keep since the start (disk full, read-only)",
            value=self._backend.turns_not_stored(),
        )
        yield GaugeMetricFamily(
            "appliance_latency_budget_seconds",
            "turn latency budget",
            value=self._backend.budget_ms() / 1000.0,
        )
        yield from _device_gauges(self._backend.status())
        yield from _loop_stalls()
        llm = self._backend.llm_load()
        if llm is not None:
            yield GaugeMetricFamily(
                "appliance_llm_slots", "conversations the LLM answers at once", value=llm.slots
            )
            yield GaugeMetricFamily(
                "appliance_llm_slots_answering", "LLM slots generating a reply now", value=llm.answering
            )
            yield GaugeMetricFamily(
                "appliance_llm_queue", "replies waiting for an LLM slot", value=llm.waiting
            )
            yield CounterMetricFamily(
                "appliance_llm_evictions",
                "conversations whose LLM cache went to another",
                value=llm.evictions,
            )


def _device_gauges(status: StatusReport) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Which device this is (a fleet's scrape configuration labels it too, so that its alerts keep the
    labels while it is down), its disk, memory, temperatures and GPUs."""
    info = GaugeMetricFamily(
        "appliance_device_info", "the device and its software", labels=["device_id", "site_name", "version"]
    )
    info.add_metric([status.device_id, status.site_name, status.version], 1)
    yield info
    bundle = GaugeMetricFamily(
        "appliance_bundle_info", "the engine bundle version the engines run from", labels=["version", "label"]
    )
    bundle.add_metric([status.bundle.version or "unversioned", status.bundle.label], 1)
    yield bundle
    yield GaugeMetricFamily(
        "appliance_bundle_rolled_back",
        "1 when the active bundle version failed to load or kept bringing the daemon down, and the "
        "previous one runs instead",
        value=int(status.bundle.rolled_back_from is not None),
    )
    registration = status.sip_registration
    if registration is not None:
        labels = [registration.user, registration.registrar]
        registered = GaugeMetricFamily(
            "appliance_sip_registered",
            "1 while the extension is registered with the site's phone system (sip.registrar)",
            labels=["user", "registrar"],
        )
        registered.add_metric(labels, int(registration.state == RegistrationState.REGISTERED))
        yield registered
        failures = CounterMetricFamily(
            "appliance_sip_registration_failures",
            "registrations that failed (refused, unanswered) since the start",
            labels=["user", "registrar"],
        )
        failures.add_metric(labels, registration.failures)
        yield failures
    if status.sip_events is not None:
        events = CounterMetricFamily(
            "appliance_sip_events",
            "what the SIP server refused or dropped since the start: malformed messages, rejected and "
            "forbidden requests, calls refused as busy, internal errors, RTP packets from a source that "
            "is not the call's (media_dropped), keypad keys over the per-call limits (keys_refused), SRTP "
            "packets that failed authentication (srtp_rejected), failed TLS connections to the registrar (tls_failed), "
            "connections to the SIP TLS port whose handshake failed (tls_failed_incoming)",
            labels=["kind"],
        )
        for kind, count in sorted(status.sip_events.items()):
            events.add_metric([kind], count)
        yield events
    yield CounterMetricFamily(
        "appliance_wake_words_heard",
        "wake words heard since the start (wake.activation = wake_word), whether a turn followed or not: "
        'against appliance_turns_opened_total{by="wake_word"}, the wakes nobody went on to address',
        value=status.wake_words_heard,
    )
    host = status.host
    for name, text, value in (
        ("appliance_disk_total_bytes", "size of the disk holding the turn store", host.disk_total_bytes),
        (
            "appliance_disk_free_bytes",
            "free space on the disk holding the turn store",
            host.disk_total_bytes - host.disk_used_bytes,
        ),
        ("appliance_memory_total_bytes", "memory of the device", host.memory_total_bytes),
        ("appliance_memory_used_bytes", "memory in use", host.memory_used_bytes),
    ):
        yield GaugeMetricFamily(name, text, value=value)
    sensors = GaugeMetricFamily(
        "appliance_temperature_celsius", "temperature sensors (a Jetson's thermal zones)", labels=["sensor"]
    )
    for sensor, celsius in sorted(host.temperatures_c.items()):
        sensors.add_metric([sensor], celsius)
    yield sensors
    gpu_temperature = GaugeMetricFamily(
        "appliance_gpu_temperature_celsius", "GPU temperature", labels=["gpu"]
    )
    gpu_memory = GaugeMetricFamily("appliance_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu"])
    for index, gpu in enumerate(host.gpus):
        label = f"{index}: {gpu.name}"
        if gpu.temperature_c is not None:
            gpu_temperature.add_metric([label], gpu.temperature_c)
        if gpu.memory_used_bytes is not None:
            gpu_memory.add_metric([label], gpu.memory_used_bytes)
    yield gpu_temperature
    yield gpu_memory


PROBABILITY_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
LOGPROB_BUCKETS = (-3.0, -2.0, -1.5, -1.0, -0.75, -0.5, -0.3, -0.2, -0.1, 0.0)
COMPRESSION_BUCKETS = (0.5, 1.0, 1.5, 2.0, 2.4, 3.0, 4.0)


class TraceMetrics:
    def __init__(self, backend: AdminBackend, *, remember_turns: int = 10 * SCRAPE_TURNS) -> None:
        self.backend = backend
        self.registry = CollectorRegistry(auto_describe=True)
        self.stage_seconds = Histogram(
            "appliance_stage_latency_seconds",
            "duration of each turn stage (turn_latency: end of speech to first audio played)",
            ["stage"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.turns = Counter(
            "appliance_turns",
            "turns recorded, by outcome (as the admin page shows it)",
            ["outcome"],
            registry=self.registry,
        )
        self.over_budget = Counter(
            "appliance_turns_over_budget", "turns whose latency exceeded the budget", registry=self.registry
        )
        self.turn_checks = Counter(
            "appliance_turn_checks",
            "end-of-turn model checks: all (checked), not heard as finished (unfinished), failed",
            ["verdict"],
            registry=self.registry,
        )
        self.endings = Counter(
            "appliance_turn_endings", "turns by what ended the utterance", ["by"], registry=self.registry
        )
        self.words_missing = Counter(
            "appliance_turn_words_not_expected",
            "turns whose pause the words could not judge (the sound decided alone), by why: off, "
            "model_cannot (no chat template, site server), llm_busy (answering another call), no_pause",
            ["why"],
            registry=self.registry,
        )
        self.verdicts = Histogram(
            "appliance_turn_complete_probability",
            "the end-of-turn verdicts of the pause that ended each turn: the sound's (Smart Turn) and the "
            "words' (the reply LLM's P(the words end the message))",
            ["judge"],
            buckets=PROBABILITY_BUCKETS,
            registry=self.registry,
        )
        self.heard = Counter(
            "appliance_turns_heard",
            "turns with words heard, by the bundle version that answered them",
            ["version"],
            registry=self.registry,
        )
        self.quality = Counter(
            "appliance_turn_quality_signals",
            "turns with words heard that show a quality signal (appliance.quality: unsure, repeated, "
            "barge_in, tool_failed, fallback, empty), by the bundle version that answered them",
            ["signal", "version"],
            registry=self.registry,
        )
        self.asr_logprob = Histogram(
            "appliance_asr_avg_logprob",
            "Whisper's average log probability of each transcript's tokens (under -1: unsure)",
            ["version"],
            buckets=LOGPROB_BUCKETS,
            registry=self.registry,
        )
        self.asr_no_speech = Histogram(
            "appliance_asr_no_speech_probability",
            "Whisper's probability that no one spoke, per transcript",
            ["version"],
            buckets=PROBABILITY_BUCKETS,
            registry=self.registry,
        )
        self.asr_compression = Histogram(
            "appliance_asr_compression_ratio",
            "each transcript's gzip compression ratio (over 2.4: a repetition loop)",
            ["version"],
            buckets=COMPRESSION_BUCKETS,
            registry=self.registry,
        )
        for verdict in TurnCheck:
            self.turn_checks.labels(verdict=verdict.value)
        self.withheld = Counter(
            "appliance_clauses_withheld",
            "clauses of replies not spoken, by why: figure (a figure no source gave), internal (the "
            "product's instructions to the model)",
            ["why"],
            registry=self.registry,
        )
        self.declined = Counter(
            "appliance_turns_declined", "replies that said agent.not_known_reply", registry=self.registry
        )
        self.overlaps = Counter(
            "appliance_overlaps",
            "speech over a reply, by what it was taken for: backchannel (the reply went on), stop_word, "
            "interruption",
            ["kind"],
            registry=self.registry,
        )
        for kind in OverlapKind:
            self.overlaps.labels(kind=kind.value)
        self.opened = Counter(
            "appliance_turns_opened",
            "turns by what let the speech begin them: always, wake_word, follow_up (after a reply), "
            "answering (over a turn still running)",
            ["by"],
            registry=self.registry,
        )
        for opened in OpenedBy:
            self.opened.labels(by=opened.value)
        for by in EndedBy:
            self.endings.labels(by=by.value)
        for judge in Judge:
            self.verdicts.labels(judge=judge.value)
        for why in WordsNotExpected:
            self.words_missing.labels(why=why.value)
        for reason in WithheldWhy:
            self.withheld.labels(why=reason.value)
        for stage in STAGES:
            self.stage_seconds.labels(stage=stage)
        for outcome in TurnOutcome:
            self.turns.labels(outcome=outcome.value)
        self.registry.register(_LiveGauges(backend))
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_turns
        self._lock = threading.Lock()

    def observe(self, trace: TurnTrace) -> None:
        self.turns.labels(outcome=turn_outcome(trace).value).inc()
        self.turn_checks.labels(verdict=TurnCheck.CHECKED.value).inc(trace.turn_checks)
        self.turn_checks.labels(verdict=TurnCheck.UNFINISHED.value).inc(trace.turn_incomplete)
        self.turn_checks.labels(verdict=TurnCheck.FAILED.value).inc(trace.turn_check_failed)
        if trace.endpoint_by in _ENDINGS:
            self.endings.labels(by=trace.endpoint_by).inc()
        if trace.words_not_expected in _WORDS_REASONS:
            self.words_missing.labels(why=trace.words_not_expected).inc()
        for clause in trace.withheld:
            if clause.get("why") in _WITHHELD_REASONS:
                self.withheld.labels(why=clause["why"]).inc()
        if trace.declined:
            self.declined.inc()
        for overlap in trace.overlaps:
            if overlap.get("kind") in _OVERLAP_KINDS:
                self.overlaps.labels(kind=overlap["kind"]).inc()
        if trace.opened_by in _OPENED_BY:
            self.opened.labels(by=trace.opened_by).inc()
        for judge, probability in (
            (Judge.SOUND, trace.turn_complete_p),
            (Judge.WORDS, trace.words_complete_p),
        ):
            if probability is not None:
                self.verdicts.labels(judge=judge.value).observe(probability)
        self._observe_quality(trace)
        if trace.error or trace.cancelled:  # the stages of turns that ran their course
            return
        for stage in STAGES:
            seconds = trace.stage_s(stage)
            if seconds is not None:
                self.stage_seconds.labels(stage=stage).observe(seconds)
        latency = trace.stage_s(BUDGET_STAGE)
        if latency is not None and latency * 1000.0 > self.backend.budget_ms():
            self.over_budget.inc()

    def _observe_quality(self, trace: TurnTrace) -> None:
        if not trace.transcript:
            return
        version = trace.bundle_version or "unversioned"
        self.heard.labels(version=version).inc()
        for signal in quality_signals(trace):
            self.quality.labels(signal=signal, version=version).inc()
        for histogram, value in (
            (self.asr_logprob, trace.asr_avg_logprob),
            (self.asr_no_speech, trace.asr_no_speech_p),
            (self.asr_compression, trace.asr_compression_ratio),
        ):
            if value is not None:
                histogram.labels(version=version).observe(value)

    def take_new_turns(self) -> int:
        """Observe the stored turns not seen before; returns how many."""
        with self._lock:
            newest = self.backend.recent_traces(1)
            if not newest or newest[0].turn_id in self._seen:
                return 0  # nothing new: skip reading the last SCRAPE_TURNS turns
            new = [t for t in self.backend.recent_traces(SCRAPE_TURNS) if t.turn_id not in self._seen]
            for trace in reversed(new):  # oldest first
                self.observe(trace)
                self._seen[trace.turn_id] = None
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)
            return len(new)

    def render(self) -> bytes:
        self.take_new_turns()
        return generate_latest(self.registry)


def _loop_stalls() -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    figures = current_figures()
    if figures is None:
        return
    held = f"the event loop was held longer than {STALL_S * 1000:.0f} ms (every call's audio paused)"
    yield CounterMetricFamily("appliance_event_loop_stalls", f"times {held}", value=figures.stalls)
    yield CounterMetricFamily(
        "appliance_event_loop_held_seconds", f"seconds {held}, all together", value=figures.held_s
    )
    yield GaugeMetricFamily(
        "appliance_event_loop_longest_stall_seconds",
        "the longest stall since the start",
        value=figures.longest_s,
    )
