"""The echo canceller's room kept across starts (``audio.echo_room_file``): the next start cancels the
first reply's echo as well as the last one's; a file from other devices, a damaged one or a disk
that cannot be written leaves the canceller learning from nothing, as before, and says why."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

from appliance.audio.echo import KEEP_ROOM_FIRST_S, LEAD_S, EchoCancelledSource, PlaybackTimeline
from appliance.audio.echo_room import KEEP_DB, RoomMemory, room_key
from appliance.audio.files import ArraySource, MemorySink
from appliance.config import Settings, load_settings, override
from appliance.daemon import local_session as daemon
from appliance.engine_set import session_config
from appliance.pipeline.workers import EngineWorker
from appliance.trace.labels import SessionKind
from bench import rooms
from engines.aec import (
    BLOCK_SAMPLES,
    EchoCanceller,
    EchoRoom,
    EchoStream,
    Fit,
    RoomNotUsable,
    load_room,
    save_room,
)
from engines.aec.linear import BLOCK, PARTITIONS
from engines.aec.room import MIN_FIT_DB, fit_room, impulse_response, solve_room, solve_toeplitz, weights_of
from engines.tts import TtsEngine

RATE = 16000
KEY = {"input_device": "hw:1", "output_device": None, "device_sample_rate_hz": 48000, "echo_delay_ms": 84.0}


def _room(cancelled_db: float = 20.0, seed: int = 0) -> EchoRoom:
    rng = np.random.default_rng(seed)
    shape = (PARTITIONS, BLOCK + 1)
    weights = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    return EchoRoom(weights=weights, cancelled_db=cancelled_db, learnt_at=1.7e9)


def test_a_kept_room_is_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "state" / "echo-room.npz"
    save_room(path, _room(), KEY)
    back = load_room(path, KEY)
    assert np.array_equal(back.weights, _room().weights)
    assert back.cancelled_db == 20.0 and back.learnt_at == 1.7e9
    assert not list(path.parent.glob("*.partial"))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda p: None, "does not exist yet"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not really"), "is not a room the canceller kept"),
        (lambda p: p.write_bytes(b""), "is not a room the canceller kept"),
        (lambda p: save_room(p, _room(), KEY | {"echo_delay_ms": 90.0}), "was learnt with"),
        (
            lambda p: save_room(p, EchoRoom(np.zeros((8, BLOCK + 1), np.complex128), 20.0), KEY),
            "holds weights of shape (8, 161)",
        ),
        (
            lambda p: save_room(p, EchoRoom(np.full((PARTITIONS, BLOCK + 1), np.nan + 0j), 20.0), KEY),
            "finite",
        ),
    ],
    ids=["missing", "damaged", "empty", "other-delay", "other-shape", "not-finite"],
)
def test_a_room_that_cannot_be_used_says_why(tmp_path: Path, damage: object, said: str) -> None:
    path = tmp_path / "echo-room.npz"
    damage(path)  # type: ignore[operator]
    with pytest.raises(RoomNotUsable, match=None) as raised:
        load_room(path, KEY)
    assert said in str(raised.value) and str(path) in str(raised.value)


def test_memory_keeps_only_a_room_that_cancels_and_recalls_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    memory = RoomMemory(tmp_path / "echo-room.npz", KEY)
    assert memory.recall() is None and "learns the room from the first reply" in caplog.text
    assert not memory.keep(None)
    assert not memory.keep(_room(cancelled_db=KEEP_DB - 1.0))  # still learning, or no echo to learn
    assert not memory.path.exists()
    assert memory.keep(_room(cancelled_db=25.0))
    kept = _room(cancelled_db=25.0, seed=1)
    assert memory.keep(kept)
    recalled = memory.recall()
    assert recalled is not None and np.array_equal(recalled.weights, kept.weights)
    assert "starts from the room learnt" in caplog.text and "25 dB down" in caplog.text
    # Another device: the file stays for the devices it was learnt with, this start learns anew.
    assert RoomMemory(memory.path, KEY | {"input_device": "hw:2"}).recall() is None
    assert memory.path.exists()


def test_a_disk_that_cannot_be_written_is_said_once_and_the_session_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    memory = RoomMemory(blocker / "echo-room.npz", KEY)  # its directory is a file
    assert not memory.keep(_room())
    assert not memory.keep(_room())
    assert caplog.text.count("cannot keep the echo canceller's room") == 1
    assert "audio.echo_room_file" in caplog.text


def _reply(tts: TtsEngine, text: str) -> np.ndarray:
    audio = rooms.at_level(np.concatenate(list(tts.synthesize(text, sample_rate_hz=RATE))), -20.0)
    return audio[: len(audio) // 512 * 512]


def _linear_out(
    engine: EchoCanceller, reply: np.ndarray, room: EchoRoom | None, *, moved: int = 0
) -> tuple[np.ndarray, np.ndarray, EchoStream]:
    """The office's echo of ``reply`` through a stream started from ``room``, its reference
    ``moved`` samples later than calibrated (another start's latencies): the microphone, the linear
    output and the stream."""
    delay_s = 0.08
    mic = rooms.echo(reply, rooms.ROOMS[1], delay_s=delay_s, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    shift = round((delay_s - LEAD_S) * RATE) + moved
    reference = np.concatenate([np.zeros(shift, np.float32), reply])[: len(reply)]
    stream = engine.stream(room)
    outs = [stream.process(mic[i : i + 512], reference[i : i + 512]).linear for i in range(0, len(mic), 512)]
    return mic, np.concatenate(outs)[BLOCK_SAMPLES:], stream


@pytest.mark.parametrize("moved", [0, 21, -37], ids=["same-start", "1.3ms-later", "2.3ms-sooner"])
def test_a_stream_started_from_the_room_cancels_a_new_reply_at_once_wherever_the_start_put_it(
    aec_engine: EchoCanceller, piper_tts: TtsEngine, moved: int
) -> None:
    """Piper's replies through a simulated office: a stream learns the room from two sentences (the
    daemon keeps it after 10 s of replies, KEEP_ROOM_FIRST_S). A new start's latencies differ (here
    its reference comes ``moved`` samples later; one sample already costs the kept filter most of
    what it cancelled), so a new stream first places the kept filter on its own first quarter-second
    of echo, then goes on from it: from half a second to a second and a half into the next reply it
    leaves the echo 24 dB down, against 6 dB for a stream starting from nothing."""
    first = (
        "The canteen is open from half past eleven to two, and the menu is on the board by the entrance. "
        "Line three stopped at ten past nine for a tool change and was running again by half past."
    )
    _, _, learner = _linear_out(aec_engine, _reply(piper_tts, first), None)
    learnt = learner.room()
    assert learnt is not None and learnt.cancelled_db > 15.0, learnt
    second = _reply(piper_tts, "Visitors park in the north car park. Please sign in at the front desk.")

    def early_db(room: EchoRoom | None) -> tuple[float, EchoStream]:
        mic, out, stream = _linear_out(aec_engine, second, room, moved=moved)
        window = slice(RATE // 2, RATE * 3 // 2)
        return float(10 * np.log10(np.sum(mic[window] ** 2) / np.sum(out[window] ** 2))), stream

    (cold, _), (warm, stream) = early_db(None), early_db(learnt)
    fit = stream.fit
    assert fit is not None and abs(fit.lag + moved) <= 0.5, fit
    assert warm > 15.0 and warm > cold + 6.0, (cold, warm)


def test_a_kept_room_that_does_not_fit_this_one_is_not_used() -> None:
    """The speaker moved (another echo path altogether): the kept filter, placed as well as it can
    be, would leave the echo hardly lower, so the stream learns from nothing."""
    rng = np.random.default_rng(3)
    played = rng.normal(scale=0.1, size=RATE).astype(np.float32)
    kept_path, new_path = rng.normal(size=400) * np.exp(-np.arange(400) / 80.0), rng.normal(size=400)
    response = np.zeros(PARTITIONS * BLOCK)
    response[320:720] = kept_path
    kept = EchoRoom(weights=weights_of(response), cancelled_db=25.0)
    heard = np.convolve(played, new_path)[: len(played)] * 0.1
    fit = fit_room(kept, heard, played)
    assert fit.cancelled_db < MIN_FIT_DB
    here = np.convolve(played, np.concatenate([np.zeros(333), kept_path]))[: len(played)]
    placed = fit_room(kept, here, played)  # the same path, 13 samples later: found
    assert abs(placed.lag - 13) <= 0.1 and placed.cancelled_db > 40.0, placed


def _new_room(seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.random.Generator]:
    """(what was heard, what played, the echo path) of ``seconds`` of white noise played."""
    rng = np.random.default_rng(5)
    played = rng.normal(scale=0.1, size=round(RATE * seconds))
    path = np.zeros(PARTITIONS * BLOCK)
    path[300:1100] = rng.normal(size=800) * np.exp(-np.arange(800) / 150.0)
    heard = np.convolve(played, path)[: len(played)] * 0.2 + rng.normal(scale=1e-4, size=len(played))
    return heard, played, path, rng


NOTHING = np.zeros((PARTITIONS, BLOCK + 1), dtype=np.complex128)


def test_a_new_room_is_solved_from_its_first_echo() -> None:
    """No room kept: a second of what played and what was heard is enough to solve for the echo
    path at once, where the adaptive filter would take several; a filter that already does as well
    is kept, and a person speaking meanwhile leaves the solution unused."""
    heard, played, path, rng = _new_room(1.0)
    solved = solve_room(heard, played, NOTHING)
    assert solved is not None and not solved.kept and solved.used and solved.cancelled_db > 12.0, solved
    assert np.corrcoef(impulse_response(solved.weights), path)[0, 1] > 0.9
    assert solve_room(heard, played, solved.weights) is None  # no better than what it has

    person = rng.normal(scale=0.2, size=len(played))  # as loud as the echo, unlike anything played
    spoken_over = solve_room(heard + person, played, NOTHING)
    assert spoken_over is not None and not spoken_over.used, spoken_over
    assert solve_room(heard, np.zeros_like(played), NOTHING) is None  # nothing played: nothing to solve


def test_a_solution_is_judged_on_echo_it_was_not_solved_from() -> None:
    """2,560 taps fit any half second: judged on the samples it was solved from, this one would
    pass; on the last tenth of a second, held out, it leaves too much to be used."""
    heard, played, _path, _rng = _new_room(0.5)
    solved = solve_room(heard, played, NOTHING)
    assert solved is not None and 3.0 < solved.cancelled_db < MIN_FIT_DB and not solved.used, solved


def test_the_toeplitz_solver_solves_what_numpy_solves() -> None:
    rng = np.random.default_rng(9)
    signal = np.convolve(rng.normal(size=4000), [1.0, 0.9, 0.5])[:4000]
    first = np.correlate(signal, signal, "full")[3999 : 3999 + 64] * (1 + np.eye(1, 64, 0)[0] * 0.002)
    right = rng.normal(size=64)
    matrix = first[np.abs(np.arange(64)[:, None] - np.arange(64)[None, :])]
    np.testing.assert_allclose(solve_toeplitz(first, right), np.linalg.solve(matrix, right), rtol=1e-9)
    with pytest.raises(np.linalg.LinAlgError):
        solve_toeplitz(np.array([1.0, 2.0]), np.array([1.0, 1.0]))  # not positive definite


class _Stream:
    """A canceller stream that has heard ``heard_s`` of playback and learnt ``room``."""

    def __init__(self, room: EchoRoom | None) -> None:
        self.heard_s = 0.0
        self.learnt = room

    def process(self, capture: np.ndarray, reference: np.ndarray) -> object:
        from engines.aec import Cancelled

        self.heard_s += len(capture) / RATE
        return Cancelled(suppressed=capture, linear=capture, echo=np.zeros_like(capture))

    def reference_heard_s(self) -> float:
        return self.heard_s

    def room(self) -> EchoRoom | None:
        return self.learnt

    fit = None


def test_the_source_keeps_the_room_while_it_plays_and_at_its_end(tmp_path: Path) -> None:
    memory = RoomMemory(tmp_path / "echo-room.npz", KEY)
    seconds = KEEP_ROOM_FIRST_S + 2.0
    stream = _Stream(_room(cancelled_db=18.0))
    source = EchoCancelledSource(
        ArraySource(np.zeros(round(seconds * RATE), np.float32), realtime=False),
        stream=stream,  # type: ignore[arg-type]
        timeline=PlaybackTimeline(),
        worker=EngineWorker("aec"),
        echo_delay_s=0.0,
        memory=memory,
    )

    async def run() -> tuple[bool, float]:
        kept_while_playing = False
        async for _ in source.frames():
            kept_while_playing = kept_while_playing or memory.path.exists()
        stream.learnt = _room(cancelled_db=30.0)
        await source.close()
        return kept_while_playing, load_room(memory.path, KEY).cancelled_db

    kept_while_playing, at_the_end = asyncio.run(run())
    assert kept_while_playing and at_the_end == 30.0


def test_a_source_closed_after_the_engines_still_closes_its_microphone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = EngineWorker("aec")
    worker.shutdown()
    closed: list[bool] = []
    microphone = ArraySource(np.zeros(512, np.float32), realtime=False)

    async def close_microphone() -> None:
        closed.append(True)

    microphone.close = close_microphone  # type: ignore[method-assign]
    source = EchoCancelledSource(
        microphone,
        stream=_Stream(_room()),  # type: ignore[arg-type]
        timeline=PlaybackTimeline(),
        worker=worker,
        echo_delay_s=0.0,
        memory=RoomMemory(tmp_path / "echo-room.npz", KEY),
    )
    asyncio.run(source.close())
    assert closed == [True] and "the room was not kept at the end" in caplog.text


def test_the_source_says_where_the_room_was_placed_or_solved_and_marks_the_first_frame_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The log says where the kept room fitted, or what the solved one cancels; the linear ear is
    told once (``HeardFrame.new_filter``) that the canceller went on from another filter."""
    caplog.set_level(logging.INFO)
    stream = _Stream(None)
    stream.fit = Fit(weights=_room().weights, lag=-16.0, gain=2.0, cancelled_db=21.4)  # type: ignore[assignment]
    source = EchoCancelledSource(
        ArraySource(np.zeros(2048, np.float32), realtime=False),
        stream=stream,  # type: ignore[arg-type]
        timeline=PlaybackTimeline(),
        worker=EngineWorker("aec"),
        echo_delay_s=0.0,
    )

    async def run() -> list[bool]:
        return [frame.new_filter async for frame in source.frames()]

    assert asyncio.run(run()) == [False] * 4  # a kept room is judged with the frames before it
    assert caplog.text.count("the kept room fits 1.00 ms sooner and +6.0 dB louder: echo 21 dB down") == 1
    stream.fit = Fit(weights=_room().weights, lag=0.0, gain=1.0, cancelled_db=13.2, kept=False)  # type: ignore[assignment]
    caplog.clear()
    assert asyncio.run(run()) == [True, False, False, False]  # a solved room, on its own frames
    assert "the room solved from the first " in caplog.text and "leaves the echo 13 dB down" in caplog.text


def test_the_daemon_starts_the_local_microphone_from_the_kept_room_and_never_a_call(
    tmp_path: Path, aec_engine: EchoCanceller
) -> None:
    path = tmp_path / "echo-room.npz"
    settings = override(load_settings(None), audio={"echo_room_file": str(path), "echo_cancellation": "on"})
    kept = _room()
    save_room(path, kept, room_key(settings.audio))

    def wire(kind: str, settings: Settings = settings) -> EchoCancelledSource:
        source, _, _ = daemon.with_echo_cancellation(
            settings,
            (aec_engine, EngineWorker("aec")),
            ArraySource(np.zeros(512, np.float32), realtime=False),
            MemorySink(RATE),
            kind=SessionKind(kind),
            speaker=True,
            config=session_config(settings),
        )
        assert isinstance(source, EchoCancelledSource)
        return source

    local = wire("microphone")
    assert local.memory is not None and local.memory.path == path
    placing = local.stream._kept  # type: ignore[attr-defined]  # placed on the first echo heard
    assert placing is not None and np.array_equal(placing.weights, kept.weights)
    call = wire("sip")
    assert call.memory is None and call.stream._kept is None  # type: ignore[attr-defined]
    # "" in the site's file: a start learns the room anew, and keeps nothing.
    unkept = wire("microphone", override(settings, audio={"echo_room_file": ""}))
    assert unkept.memory is None and unkept.stream._kept is None  # type: ignore[attr-defined]
