"""Hostile files and settings, round four, part by part (the daemon meets the same through its admin API
in test_hostile_daemon.py): every file a setting names is read one bounded way, a kept echo room is
checked from its headers before its data is made, sentences take only bare placeholders, transfer
targets are whole and headerless, a transfer needs the person's own request, a hand-edited
bundles.json falls back to the last good selection, and a turn database has one daemon."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import psutil
import pytest
from pydantic import ValidationError

from appliance.tools.put_through import asked_to_be_put_through
from appliance.trace.owner import TurnDatabaseInUse
from appliance.trace.store import TraceStore
from engines.aec import RoomNotUsable, load_room
from engines.bundle_store import LAST_GOOD_STATE, STATE, BundleStore
from engines.manifest import Artifact, sha256_of
from engines.params import check_sentence
from engines.setting_files import FACTS, SECRET, SettingFileError, read_setting_file, read_setting_text

KEY = {"input_device": None, "output_device": None, "device_sample_rate_hz": 48000, "echo_delay_ms": 84.0}


# --- one bounded way to read a file a setting names -------------------------------------------------
def test_a_pipe_a_device_a_folder_and_a_large_file_are_refused_at_once(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # nobody writes to it
    large = tmp_path / "large.md"
    with large.open("wb") as out:
        out.truncate(FACTS.max_bytes + 1)  # sparse
    cases = {
        pipe: "is a named pipe",
        Path("/dev/zero"): "is a device",
        tmp_path: "is a directory",
        large: "more than the 1,048,576 it may",
    }
    process = psutil.Process()
    rss = process.memory_info().rss
    for path, said in cases.items():
        started = time.monotonic()
        with pytest.raises(SettingFileError, match=said) as raised:
            read_setting_file(path, FACTS)
        assert time.monotonic() - started < 5.0  # never waits on the pipe; a loaded machine meets this
        assert (
            str(path) in str(raised.value)
            and "facts file" in str(raised.value)
            and "fix:" in str(raised.value)
        )
    assert process.memory_info().rss - rss < 50e6
    with pytest.raises(FileNotFoundError):
        read_setting_file(tmp_path / "absent", FACTS)


def test_a_file_within_its_kind_is_read_and_text_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a-token-of-forty-characters-0123456789\n")
    assert read_setting_text(path, SECRET).strip() == "a-token-of-forty-characters-0123456789"
    path.write_bytes(b"\xff\xfe not text")
    with pytest.raises(SettingFileError, match="is not utf-8 text"):
        read_setting_text(path, SECRET)


# --- the kept echo room: headers before data ---------------------------------------------------------
def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()  # the magic, the header and its padding


def _npz(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)


def _meta() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array(json.dumps({"format": 1, "key": KEY})))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "said"),
    [
        # A 564-byte file declaring 64 GB of weights raised an unhandled MemoryError.
        (
            {"meta": _meta(), "weights": _npy_header("<c16", (1 << 16, 1 << 16)) + b"\0" * 64},
            "weights of shape",
        ),
        # Metadata declaring 2 GB of text, as zeros that deflate to almost nothing.
        ({"meta": _npy_header("<U500000000", ()) + bytes(1 << 20), "weights": b""}, "meta declares"),
        ({"meta": _meta(), "weights": _npy_header("|O", (16, 161))}, "weights of shape"),
    ],
    ids=["weights-64-GB", "meta-2-GB", "pickled-objects"],
)
def test_an_echo_room_declaring_gigabytes_is_refused_before_they_are_made(
    tmp_path: Path, members: dict[str, bytes], said: str
) -> None:
    path = tmp_path / "echo-room.npz"
    _npz(path, members)
    assert path.stat().st_size < 64 * 1024
    process = psutil.Process()
    rss = process.memory_info().rss
    with pytest.raises(RoomNotUsable, match=said) as raised:
        load_room(path, KEY)
    assert process.memory_info().rss - rss < 50e6, "the declared size was made"
    assert str(path) in str(raised.value)


def test_an_echo_room_that_is_a_pipe_or_too_large_is_not_waited_for(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.npz"
    os.mkfifo(pipe)
    with pytest.raises(RoomNotUsable, match="is a named pipe"):
        load_room(pipe, KEY)
    large = tmp_path / "large.npz"
    with large.open("wb") as out:
        out.truncate(2 << 30)  # sparse: 2 GB said
    with pytest.raises(RoomNotUsable, match="more than the"):
        load_room(large, KEY)


# --- sentences and targets ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sentence", "said"),
    [
        ("{target:d}", "has a format of its own"),
        ("{target:>100000000}", "has a format of its own"),
        ("{target!r}", "has a format of its own"),
        ("{target.__class__}", "is not a placeholder"),
        ("{target[0]}", "is not a placeholder"),
        ("x" * 301, "characters long"),
        ("Hold on.\nRefer-To: x", "one line"),
    ],
)
def test_a_sentence_takes_only_bare_placeholders_and_a_length_cap(sentence: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        check_sentence(sentence, ("target",))
    assert check_sentence("I'll put you through to {target}. {{braces}}", ("target",))


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("2100\n", "neither an extension"),
        ("sip:2100@10.20.0.2\n", "neither an extension"),
        ("sip:2100@10.20.0.2?Replaces=call%40host%3Bto-tag%3D1", "headers"),
    ],
)
def test_a_transfer_target_is_matched_whole_and_carries_no_headers(target: str, said: str) -> None:
    from appliance.pipeline.params import CallParams

    with pytest.raises(ValidationError, match=said):
        CallParams(transfer_targets={"desk": target})
    assert CallParams(transfer_targets={"desk": "sip:2100@10.20.0.2;transport=tcp"}).transfer_targets


def test_other_sentences_are_checked_too() -> None:
    from appliance.config import AgentParams, ConversationParams

    for section, key in (
        (AgentParams, "tool_failed_reply"),
        (AgentParams, "tool_misunderstood_reply"),
        (ConversationParams, "fallback_reply"),
        (ConversationParams, "busy_reply"),
    ):
        with pytest.raises(ValidationError, match=r"has a format of its own|is not a placeholder"):
            section.model_validate({key: "{tool:>99999999}"})


# --- a transfer nobody asked for ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("words", "destination", "asked"),
    [
        ("What tools can you call? Answer in JSON.", "front desk", False),
        ("What tools can you call? Answer in JSON.", "operator", False),
        ("When does the canteen open?", "front desk", False),
        ("Tell me about the front desk.", "front desk", False),  # named, but not asked to be put through
        ("Could you put me through to the front desk, please?", "front desk", True),
        ("I'd like to speak to security.", "security", True),
        ("Can I talk to a person?", "front desk", True),  # the operator
        ("Can I talk to a person?", "security", False),  # not the operator, and not named
        ("Transfer me to the shift supervisors.", "shift supervisor", True),
    ],
)
def test_a_transfer_needs_the_persons_own_request(words: str, destination: str, asked: bool) -> None:
    assert asked_to_be_put_through(words, destination, operator="front desk") is asked


# --- bundles.json edited by hand ---------------------------------------------------------------------
def _versioned_root(root: Path) -> tuple[BundleStore, str, str]:
    store = BundleStore(root)
    ids = []
    for label in ("one", "two"):
        folder = root.parent / f"src-{label}"
        folder.mkdir()
        (folder / "model.bin").write_bytes(label.encode())
        art = Artifact("asr/model", "model.bin", "onnx", sha256_of(folder / "model.bin"), 3)
        manifest = {"format": 1, "meta": {"label": label}, "artifacts": [art.__dict__]}
        (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        ids.append(store.add(folder, label=label).id)
    store.activate(ids[0])
    store.activate(ids[1])
    return store, ids[1], ids[0]


@pytest.mark.parametrize(
    "edited",
    ['{"active": ', '["not", "a", "selection"]', '{"active": 7}', '{"active": "abcdef012345"}'],
    ids=["not-json", "a-list", "a-number", "a-version-not-there"],
)
def test_a_hand_edited_selection_falls_back_to_the_last_good_one(
    tmp_path: Path, edited: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, active, previous = _versioned_root(tmp_path / "bundle")
    assert (store.root / LAST_GOOD_STATE).is_file()
    (store.root / STATE).write_text(edited)
    state = store.state()
    assert (state.active, state.previous) == (active, previous)
    assert store.active_version().id == active
    assert "the last good selection" in caplog.text and str(store.root / STATE) in caplog.text


# --- one daemon to a turn database -------------------------------------------------------------------
def test_a_second_daemon_on_a_turn_database_is_told_which_process_holds_it(tmp_path: Path) -> None:
    db = tmp_path / "turns.sqlite3"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from appliance.trace.store import TraceStore; "
            f"TraceStore(Path({str(db)!r}), max_turns=10, owner=True); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(
            TurnDatabaseInUse, match=rf"in use by another appliance daemon \(process {holder.pid}\)"
        ):
            TraceStore(db, max_turns=10, owner=True)
        TraceStore(db, max_turns=10).close()  # a reader (python -m appliance.trace) takes no lock
    finally:
        holder.kill()
        holder.communicate()
    store = TraceStore(db, max_turns=10, owner=True)  # the holder gone, the lock is free
    again = TraceStore(db, max_turns=10, owner=True)  # ... and the same process may hold it twice
    again.close()
    store.close()


def test_calibration_keeps_only_chirps_that_agree() -> None:
    """A busy machine measured 55.3, 55.3 and 78.7 ms: one late write is an outlier, not the answer."""
    from appliance.audio.calibrate import AGREE_MS, _agreeing

    assert _agreeing([55.3, 78.7, 55.3], 2) == [55.3, 55.3]
    assert _agreeing([49.6, 55.2, 58.0, 114.1, 114.1, 114.1], 2) == [114.1, 114.1]
    assert _agreeing([150.4, 150.4, 153.7, 213.2, 213.2, 213.2], 2) == [150.4, 150.4]  # lowest, not most
    assert _agreeing([40.0, 43.0, 47.0], 2) == []  # none agree: play more chirps
    assert _agreeing([40.0, 40.0 + AGREE_MS, 41.0], 3) == [40.0, 41.0, 42.0]


def test_a_bundle_folder_with_a_manifest_and_no_model_files_is_refused_by_the_check(tmp_path: Path) -> None:
    """The admin page's write and `appliance config check` both run this check: a folder holding a
    manifest whose model files are not there was accepted (200) and then the daemon did not start."""
    from appliance.config import load_settings, override
    from appliance.daemon.start_problems import startup_problems

    store, _, _ = _versioned_root(tmp_path / "bundle")
    (store.active_version().path / "model.bin").unlink()
    problems = startup_problems(override(load_settings(None), bundle={"dir": str(store.root)}))
    assert [p.key for p in problems] == ["bundle.dir"], problems
    assert "model.bin" in problems[0].message and "damaged" in problems[0].message
