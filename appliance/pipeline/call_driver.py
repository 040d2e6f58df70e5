"""A session's phone call: its keys, ticks and the end of each turn go to the call policy
(call_policy.py), and this carries out what the policy says: cut the reply, read the number being
typed, answer it, say a sentence, transfer, hang up."""

from __future__ import annotations

import asyncio
import logging
import time

from appliance.pipeline import call_policy as policy
from appliance.pipeline.keypad import TypedNumber, typed_text
from appliance.pipeline.partials import PartialsRecord
from appliance.pipeline.session_config import SessionConfig
from appliance.pipeline.turn import Turn
from appliance.pipeline.turn_keeper import TurnKeeper
from appliance.transfer import TransferFailed
from engines.vad.ended_by import EndedBy

log = logging.getLogger(__name__)


class CallDriver:
    def __init__(
        self, line: policy.CallLine, turns: TurnKeeper, config: SessionConfig, session_id: str
    ) -> None:
        self.line = line
        self.policy = policy.CallPolicy(
            config.call, transfer_domain=config.transfer_domain, now=time.monotonic()
        )
        self._turns = turns
        turns.on_finished = self._turn_finished
        self._session_id = session_id
        self._number = TypedNumber(
            turns.conversation.with_user, conversation=session_id, prefill=config.partials.prefill
        )
        self._after_turn: list[policy.CallAction] = []  # from a turn's end, carried out on the next tick
        self._transferring: asyncio.Task[policy.TransferOver] | None = None
        self.hang_up: str | None = None  # why the session ends the call after the current turn

    @property
    def typing(self) -> bool:
        return self.policy.typing

    async def keys(self, now: float) -> None:
        for key in self.line.pressed():
            await self._do(self.policy.handle(policy.KeyPressed(key, now, replying=self._turns.running)), now)

    def heard(self, now: float) -> None:
        self.policy.handle(policy.Heard(now))

    async def tick(self, now: float, *, busy: bool) -> None:
        actions, self._after_turn = self._after_turn, []
        if self._transferring is not None and self._transferring.done():
            over, self._transferring = self._transferring.result(), None
            if over.failed is not None:
                log.warning(
                    "session %s: the transfer to %s failed: %s", self._session_id, over.target, over.failed
                )
            actions += self.policy.handle(over)
        await self._do([*actions, *self.policy.handle(policy.Tick(now, busy=busy))], now)

    async def tick_ends_call(self, now: float, *, busy: bool) -> bool:
        """The tick; True when the session should end the call now (its last turn over)."""
        await self.tick(now, busy=busy)
        return self.hang_up is not None and self._turns.active is None

    def _turn_finished(self, turn: Turn) -> None:
        event = policy.TurnFinished(time.monotonic(), ends_call=turn.ends_call, transfer_to=turn.transfer_to)
        self._after_turn += self.policy.handle(event)

    async def close(self) -> None:
        if self._transferring is not None:
            self._transferring.cancel()
        await self._number.close()

    async def _do(self, actions: list[policy.CallAction], now: float) -> None:
        turns = self._turns
        for action in actions:
            if isinstance(action, policy.CutReply):
                if turns.running:
                    await turns.barge_in("keypad barge-in")
            elif isinstance(action, policy.Typing):
                self._number.read(action.keys, turns.engines.llm, turns.engines.llm_worker)
            elif isinstance(action, policy.AnswerTyped):
                await self._answer(action, now)
            elif isinstance(action, policy.Say):
                log.info("session %s: saying %r (%s)", self._session_id, action.text, action.by.value)
                await turns.start_without_speech(now, action.by, say=action.text)
            elif isinstance(action, policy.Transfer):
                self._transferring = asyncio.create_task(
                    self._transfer(action), name=f"transfer-{self._session_id}"
                )
            else:
                self.hang_up = action.why

    async def _answer(self, typed: policy.AnswerTyped, now: float) -> None:
        log.info("session %s: %d key(s) typed on the keypad", self._session_id, len(typed.keys))
        if typed.ignored:
            log.warning("a typed number was cut at %d keys (%d more ignored)", len(typed.keys), typed.ignored)
        record = PartialsRecord(prefill_tokens=self._number.take())
        await self._turns.start_without_speech(
            now, EndedBy.KEYPAD, typed=typed_text(typed.keys), typed_at=typed.last_key_at, record=record
        )

    async def _transfer(self, transfer: policy.Transfer) -> policy.TransferOver:
        log.info(
            "session %s: transferring the caller to %s (%s)", self._session_id, transfer.target, transfer.uri
        )
        try:
            await self.line.transfer(transfer.uri)
        except TransferFailed as err:
            return policy.TransferOver(transfer.target, str(err))
        return policy.TransferOver(transfer.target, None)
