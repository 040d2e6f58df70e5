"""What a call does besides listening: keys typed on the keypad, the operator key, a caller gone
quiet, a goodbye, a transfer.

A pure object, like the endpointer: typed events in, typed actions out; no audio, no engines, no
clock of its own (every event carries its time). The session feeds it and carries out what it says:

    KeyPressed     a key: the number being typed grows (Typing), or ends with # (AnswerTyped); the
                   first key over a reply cuts it (CutReply); the operator key says the transfer
                   preamble (Say) and puts the caller through after it
    Tick           between frames: the first says call.greeting (Say); a number paused for keypad_timeout_ms is answered; a caller silent
                   for silence_prompt_s is asked whether they are there (Say), later hung up on (HangUp)
    Heard          the caller spoke: the silence is counted afresh
    TurnFinished   a reply is over: a goodbye hangs up; a transfer the reply promised starts (Transfer)
    TransferOver   put through (HangUp), or refused or unanswered (Say, and the call goes on)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from appliance.pipeline.params import CallParams
from appliance.transfer import spoken_target
from engines.vad.ended_by import EndedBy


class CallLine(Protocol):
    """The phone call a session's audio belongs to, as the session acts on it."""

    def pressed(self) -> list[str]:
        """The keys pressed on the caller's keypad since the last time asked."""
        ...

    async def transfer(self, uri: str) -> None:
        """Put the caller through to ``uri``. Raises TransferFailed saying why not."""
        ...


MAX_TYPED_KEYS = 32  # longer than any phone, account or order number; more keys are ignored


@dataclass(frozen=True)
class KeyPressed:
    key: str
    at: float
    replying: bool  # a turn is running: its reply would be cut


@dataclass(frozen=True)
class Tick:
    at: float
    busy: bool  # a turn is running or the caller is speaking


@dataclass(frozen=True)
class Heard:
    at: float


@dataclass(frozen=True)
class TurnFinished:
    at: float
    ends_call: bool  # the reply said goodbye
    transfer_to: str | None  # the reply promised a transfer (the model's tool)


@dataclass(frozen=True)
class TransferOver:
    target: str
    failed: str | None  # why the caller was not put through; None when they were


CallEvent = KeyPressed | Tick | Heard | TurnFinished | TransferOver


@dataclass(frozen=True)
class CutReply:
    """A key pressed over a reply: stop it, as speech would."""


@dataclass(frozen=True)
class Typing:
    keys: str  # the number so far (the language model may read it ahead)


@dataclass(frozen=True)
class AnswerTyped:
    keys: str
    last_key_at: float
    ignored: int  # keys past MAX_TYPED_KEYS


@dataclass(frozen=True)
class Say:
    text: str
    by: EndedBy


@dataclass(frozen=True)
class Transfer:
    target: str  # a name of call.transfer_targets
    uri: str


@dataclass(frozen=True)
class HangUp:
    why: str


CallAction = CutReply | Typing | AnswerTyped | Say | Transfer | HangUp


class CallPolicy:
    def __init__(self, params: CallParams, *, now: float, transfer_domain: str = "") -> None:
        """``transfer_domain``: where an extension of ``transfer_targets`` is reached (the phone
        system's domain, ``SipParams.transfer_domain``); without one only SIP URIs are."""
        self.params = params
        self.transfer_domain = transfer_domain
        self._keys: list[str] = []
        self._ignored = 0
        self._last_key_at = 0.0
        self._quiet_since = now  # the caller's last sign of life, or the end of our last reply
        self._prompted = False  # ... and they were asked whether they are still there
        self._transfer_after_reply: str | None = None  # the operator key's target
        self._transferring = False
        self._greeted = not params.greeting  # call.greeting is said on the first tick of the call

    @property
    def typing(self) -> bool:
        return bool(self._keys)

    def handle(self, event: CallEvent) -> list[CallAction]:
        if isinstance(event, KeyPressed):
            return self._key(event)
        if isinstance(event, Tick):
            return self._tick(event)
        if isinstance(event, Heard):
            self._heard(event.at)
            return []
        if isinstance(event, TurnFinished):
            return self._turn_finished(event)
        return self._transfer_over(event)

    def _key(self, event: KeyPressed) -> list[CallAction]:
        params = self.params
        if event.key == params.operator_digit and not self._keys:
            self._transfer_after_reply = params.operator_target
            sentence = params.transfer_preamble.format(target=spoken_target(params.operator_target))
            return [Say(sentence, EndedBy.OPERATOR_KEY)]
        if event.key == "#":
            return self._typed()
        actions: list[CallAction] = [CutReply()] if event.replying and not self._keys else []
        self._last_key_at = event.at
        self._heard(event.at)
        if len(self._keys) >= MAX_TYPED_KEYS:
            self._ignored += 1
            return actions
        self._keys.append(event.key)
        return [*actions, Typing("".join(self._keys))]

    def _typed(self) -> list[CallAction]:
        if not self._keys:
            return []
        typed = AnswerTyped("".join(self._keys), self._last_key_at, self._ignored)
        self._keys, self._ignored = [], 0
        return [typed]

    def _tick(self, event: Tick) -> list[CallAction]:
        params = self.params
        if not self._greeted:
            self._greeted = True
            return [Say(params.greeting, EndedBy.GREETING)]
        if self._keys and event.at - self._last_key_at >= params.keypad_timeout_s:
            return self._typed()
        if params.silence_prompt_s <= 0 or event.busy or self._keys:
            return []
        quiet_s = event.at - self._quiet_since
        if not self._prompted and quiet_s >= params.silence_prompt_s:
            self._prompted = True
            return [Say(params.silence_prompt, EndedBy.SILENCE_PROMPT)]
        if self._prompted and quiet_s >= params.silence_hangup_s:
            return [
                HangUp(
                    f"nobody answered within {params.silence_hangup_s:g} s of asking whether anyone is there"
                )
            ]
        return []

    def _heard(self, at: float) -> None:
        self._quiet_since, self._prompted = at, False

    def _turn_finished(self, event: TurnFinished) -> list[CallAction]:
        self._quiet_since = event.at  # silence is counted from the end of the reply
        actions: list[CallAction] = []
        if event.ends_call:
            actions.append(HangUp("the agent ended the call (after its goodbye)"))
        target, self._transfer_after_reply = event.transfer_to or self._transfer_after_reply, None
        if target and not self._transferring:
            uri = self.params.transfer_uri(target, self.transfer_domain)
            if uri is None:
                return [
                    *actions,
                    *self._transfer_over(TransferOver(target, "not one of call.transfer_targets")),
                ]
            self._transferring = True
            actions.append(Transfer(target, uri))
        return actions

    def _transfer_over(self, event: TransferOver) -> list[CallAction]:
        self._transferring = False
        if event.failed is None:
            return [HangUp(f"put through to {event.target}")]
        sentence = self.params.transfer_failed_reply.format(target=spoken_target(event.target))
        return [Say(sentence, EndedBy.TRANSFER_FAILED)]
