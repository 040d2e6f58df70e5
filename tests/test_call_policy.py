"""The call policy alone: typed events in, typed actions out, no audio and no clock."""

from __future__ import annotations

from appliance.pipeline.call_policy import (
    MAX_TYPED_KEYS,
    AnswerTyped,
    CallAction,
    CallPolicy,
    CutReply,
    HangUp,
    Heard,
    KeyPressed,
    Say,
    Tick,
    Transfer,
    TransferOver,
    TurnFinished,
    Typing,
)
from appliance.pipeline.params import CallParams
from engines.vad.ended_by import EndedBy

DESK = "sip:2000@10.20.0.2"
PARAMS = CallParams(
    keypad_timeout_ms=1000,
    silence_prompt_s=20.0,
    silence_hangup_s=10.0,
    transfer_targets={"front desk": DESK},
    operator_digit="0",
    operator_target="front desk",
)


def _type(policy: CallPolicy, keys: str, *, at: float = 1.0, replying: bool = False) -> list[CallAction]:
    actions: list[CallAction] = []
    for i, key in enumerate(keys):
        actions += policy.handle(KeyPressed(key, at + i * 0.1, replying=replying))
    return actions


def test_a_number_typed_and_ended_by_hash_is_read_key_by_key_then_answered() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert _type(policy, "4719") == [Typing("4"), Typing("47"), Typing("471"), Typing("4719")]
    assert policy.typing
    assert policy.handle(KeyPressed("#", 2.0, replying=False)) == [AnswerTyped("4719", 1.3, 0)]
    assert not policy.typing
    assert policy.handle(KeyPressed("#", 2.1, replying=False)) == []  # nothing typed: nothing to answer


def test_a_number_is_answered_after_the_keypad_pause_not_before() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    _type(policy, "12")
    assert policy.handle(Tick(2.0, busy=False)) == []  # 0.9 s after the last key
    assert policy.handle(Tick(2.1, busy=False)) == [AnswerTyped("12", 1.1, 0)]


def test_the_first_key_over_a_reply_cuts_it_and_the_next_do_not() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert _type(policy, "12", replying=True) == [CutReply(), Typing("1"), Typing("12")]


def test_keys_past_the_longest_number_are_ignored_and_counted() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    typed = _type(policy, "5" * (MAX_TYPED_KEYS + 8))
    assert len(typed) == MAX_TYPED_KEYS
    (answer,) = policy.handle(KeyPressed("#", 99.0, replying=False))
    assert isinstance(answer, AnswerTyped) and answer.keys == "5" * MAX_TYPED_KEYS and answer.ignored == 8


def test_the_operator_key_says_so_then_puts_the_caller_through_after_the_sentence() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert policy.handle(KeyPressed("0", 1.0, replying=True)) == [
        Say("I'll put you through to the front desk.", EndedBy.OPERATOR_KEY)
    ]
    assert policy.handle(TurnFinished(3.0, ends_call=False, transfer_to=None)) == [
        Transfer("front desk", DESK)
    ]
    assert policy.handle(TransferOver("front desk", None)) == [HangUp("put through to front desk")]


def test_the_operator_digit_inside_a_number_is_a_digit() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert _type(policy, "10") == [Typing("1"), Typing("10")]


def test_an_extension_is_reached_at_the_transfer_domain_the_policy_is_given() -> None:
    params = PARAMS.model_copy(update={"transfer_targets": {"stores": "2100"}})
    policy = CallPolicy(params, now=0.0, transfer_domain="pbx.site.example:5070")
    assert policy.handle(TurnFinished(1.0, ends_call=False, transfer_to="stores")) == [
        Transfer("stores", "sip:2100@pbx.site.example:5070")
    ]
    unplaced = CallPolicy(params, now=0.0)  # no phone system: an extension is reached nowhere
    assert not any(isinstance(a, Transfer) for a in unplaced.handle(TurnFinished(1.0, False, "stores")))


def test_a_refused_transfer_is_said_and_the_call_goes_on() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert policy.handle(TurnFinished(1.0, ends_call=False, transfer_to="front desk")) == [
        Transfer("front desk", DESK)
    ]
    # A second promise while the first is under way starts nothing.
    assert policy.handle(TurnFinished(2.0, ends_call=False, transfer_to="front desk")) == []
    (said,) = policy.handle(
        TransferOver("front desk", "the phone system refused the transfer (403 Forbidden)")
    )
    assert said == Say(
        "Sorry, I could not put you through to the front desk just now.", EndedBy.TRANSFER_FAILED
    )


def test_a_target_the_site_does_not_have_is_never_dialled() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    (said,) = policy.handle(TurnFinished(1.0, ends_call=False, transfer_to="the boss"))
    assert isinstance(said, Say) and said.by is EndedBy.TRANSFER_FAILED and "the boss" in said.text


def test_a_goodbye_hangs_up() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert policy.handle(TurnFinished(1.0, ends_call=True, transfer_to=None)) == [
        HangUp("the agent ended the call (after its goodbye)")
    ]


def test_a_silent_caller_is_asked_once_then_hung_up_on_and_speaking_starts_the_count_again() -> None:
    policy = CallPolicy(PARAMS, now=0.0)
    assert policy.handle(Tick(25.0, busy=True)) == []  # a turn running or someone speaking: not silent
    assert policy.handle(Tick(19.9, busy=False)) == []
    assert policy.handle(Tick(20.0, busy=False)) == [Say("Are you still there?", EndedBy.SILENCE_PROMPT)]
    assert policy.handle(Tick(20.5, busy=True)) == []  # being asked
    policy.handle(TurnFinished(21.0, ends_call=False, transfer_to=None))  # the prompt was said by 21 s
    assert policy.handle(Tick(25.0, busy=False)) == []  # asked once
    assert policy.handle(Tick(30.9, busy=False)) == []
    (hang_up,) = policy.handle(Tick(31.0, busy=False))
    assert isinstance(hang_up, HangUp) and "10 s" in hang_up.why

    policy = CallPolicy(PARAMS, now=0.0)
    policy.handle(Tick(20.0, busy=False))
    policy.handle(Heard(22.0))  # they answered
    assert policy.handle(Tick(35.0, busy=False)) == []
    assert policy.handle(Tick(42.0, busy=False)) == [Say("Are you still there?", EndedBy.SILENCE_PROMPT)]


def test_keys_count_as_a_sign_of_life_and_no_prompt_interrupts_a_number() -> None:
    policy = CallPolicy(CallParams(silence_prompt_s=5.0, keypad_timeout_ms=30000), now=0.0)
    _type(policy, "1", at=4.0)
    assert policy.handle(Tick(9.5, busy=False)) == []  # still typing
    assert policy.handle(KeyPressed("#", 9.6, replying=False))
    assert policy.handle(Tick(9.7, busy=False)) == [Say("Are you still there?", EndedBy.SILENCE_PROMPT)]


def test_no_silence_prompt_when_the_site_turns_it_off() -> None:
    policy = CallPolicy(CallParams(silence_prompt_s=0.0), now=0.0)
    assert policy.handle(Tick(1000.0, busy=False)) == []


def test_the_greeting_is_said_once_on_the_first_tick_and_only_when_set() -> None:
    greeting = "Plant 3 reception, how can I help?"
    policy = CallPolicy(CallParams(greeting=greeting), now=0.0)
    assert policy.handle(Tick(0.02, busy=False)) == [Say(greeting, EndedBy.GREETING)]
    assert policy.handle(Tick(0.04, busy=True)) == []
    assert CallPolicy(CallParams(), now=0.0).handle(Tick(0.02, busy=False)) == []


def test_a_role_is_named_with_the_and_a_department_or_a_person_as_they_are() -> None:
    from appliance.transfer import spoken_target

    named = {
        t: spoken_target(t) for t in ("shift supervisor", "reception", "Anna Berg", "the front desk", "IT")
    }
    assert named == {
        "shift supervisor": "the shift supervisor",
        "reception": "reception",
        "Anna Berg": "Anna Berg",
        "the front desk": "the front desk",
        "IT": "IT",
    }
