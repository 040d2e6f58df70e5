"""Engine bundles side by side by version: add, activate, roll back, remove, prune, adopt; a kill at any
point leaves a root whose active version is whole; the real bundle opened through a versioned root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines.bundle import Bundle
from engines.bundle_store import EVALUATION, LAST_GOOD_STATE, STATE, VERSIONS, BundleStore, resolve_bundle_dir
from engines.errors import BundleError
from engines.manifest import Artifact, Manifest, sha256_of

REPO = Path(__file__).resolve().parents[1]


def _bundle(folder: Path, content: str) -> Path:
    """A small whole bundle: one artifact and its manifest."""
    (folder / "llm").mkdir(parents=True)
    model = folder / "llm" / "model.gguf"
    model.write_text(content)
    manifest = Manifest(
        [Artifact("llm/test", "llm/model.gguf", "llm-gguf", sha256_of(model), model.stat().st_size)]
    )
    manifest.write(folder)
    return folder


def test_versions_are_added_beside_the_active_one_which_only_activate_changes(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "root")
    first = store.add(_bundle(tmp_path / "a", "first"), label="qwen 1.5b")
    assert store.state().active is None
    store.activate(first.id)
    second = store.add(_bundle(tmp_path / "b", "second"), label="qwen 3b")
    assert store.state().active == first.id  # adding never touches the active version
    assert [v.id for v in store.versions()] == [second.id, first.id] and second.label == "qwen 3b"
    assert store.add(_bundle(tmp_path / "again", "second")).id == second.id  # the same bundle, one version
    assert resolve_bundle_dir(store.root) == first.path
    store.activate(second.id[:6])  # a prefix names a version
    assert store.state().active == second.id and store.state().previous == first.id
    assert Bundle.open(resolve_bundle_dir(store.root)).path("llm/test").read_text() == "second"


def test_a_copy_of_a_version_never_carries_its_evaluation(tmp_path: Path) -> None:
    """A canary's verdict belongs to the version it measured: a folder copied from an evaluated
    version is added without it, and so is not refused (or let through) on another's figures."""
    store = BundleStore(tmp_path / "root")
    copied = _bundle(tmp_path / "copied", "first")
    (copied / EVALUATION).write_text('{"passed": false}')
    version = store.add(copied, move=True)
    assert not (version.path / EVALUATION).exists()


def test_rollback_goes_back_and_a_second_rollback_undoes_it(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "root")
    with pytest.raises(BundleError, match="no active version"):
        resolve_bundle_dir(store.root) if (store.root / STATE).exists() else store.active_version()
    a = store.add(_bundle(tmp_path / "a", "a"))
    b = store.add(_bundle(tmp_path / "b", "b"))
    store.activate(a.id)
    with pytest.raises(BundleError, match="no previous version"):
        store.rollback()
    store.activate(b.id)
    assert store.rollback().active == a.id
    assert store.rollback().active == b.id


def test_the_active_and_previous_versions_are_never_removed_and_prune_keeps_the_newest(
    tmp_path: Path,
) -> None:
    store = BundleStore(tmp_path / "root")
    ids = [store.add(_bundle(tmp_path / str(n), f"v{n}")).id for n in range(5)]
    store.activate(ids[0])
    store.activate(ids[1])
    for kept in ids[:2]:
        with pytest.raises(BundleError, match="stays"):
            store.remove(kept)
    removed = store.prune(keep=3)
    left = {v.id for v in store.versions()}
    assert left == {ids[0], ids[1], ids[4]} and {v.id for v in removed} == {ids[2], ids[3]}
    with pytest.raises(BundleError, match="is not in"):
        store.get(ids[2])


def test_an_unversioned_bundle_is_opened_as_before_and_adopted_as_the_first_version(tmp_path: Path) -> None:
    root = _bundle(tmp_path / "root", "plain")
    assert resolve_bundle_dir(root) == root
    version = BundleStore(root).adopt()
    assert (
        not (root / "manifest.json").exists() and (root / VERSIONS / version.id / "llm/model.gguf").is_file()
    )
    assert BundleStore(root).state().active == version.id
    assert Bundle.open(resolve_bundle_dir(root)).path("llm/test").read_text() == "plain"


def test_a_damaged_state_file_is_named_with_the_fix(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "root")
    store.activate(store.add(_bundle(tmp_path / "a", "a")).id)
    (store.root / STATE).write_text("{half")
    assert resolve_bundle_dir(store.root) == store.active_version().path  # the last good selection
    (store.root / LAST_GOOD_STATE).unlink()  # a root from before it was kept, edited by hand
    with pytest.raises(BundleError, match="not readable JSON") as err:
        resolve_bundle_dir(store.root)
    assert "appliance bundle activate" in (err.value.fix or "")


_SWITCHER = """
import sys
from pathlib import Path
from engines.bundle_store import BundleStore
store = BundleStore(Path(sys.argv[1]))
ids = [v.id for v in store.versions()]
print("ready", flush=True)
n = 1
while True:
    store.activate(ids[n % len(ids)])
    n += 1
"""


def test_a_kill_during_switches_leaves_an_active_version_that_is_whole(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "root")
    for n in range(3):
        store.add(_bundle(tmp_path / str(n), f"v{n}"))
    store.activate(store.versions()[0].id)
    for delay_s in (0.05, 0.11, 0.23, 0.31, 0.47):
        child = subprocess.Popen(
            [sys.executable, "-c", _SWITCHER, str(store.root)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(delay_s)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        opened = Bundle.open(resolve_bundle_dir(store.root), full=True)
        assert opened.path("llm/test").read_text() in ("v0", "v1", "v2")


def test_an_interrupted_add_leaves_no_version_and_the_next_add_cleans_it(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "root")
    active = store.add(_bundle(tmp_path / "a", "a"))
    store.activate(active.id)
    half = store.root / VERSIONS / ".adding-0123456789ab"
    half.mkdir()
    (half / "manifest.json").write_text("{}")
    assert [v.id for v in store.versions()] == [active.id]
    store.add(_bundle(tmp_path / "b", "b"))
    assert not half.exists() and resolve_bundle_dir(store.root) == active.path


def test_the_real_bundle_loads_its_engines_through_a_versioned_root(bundle: Bundle, tmp_path: Path) -> None:
    """A version made of hard links to the installed bundle (no 2 GB copy), opened and run."""
    linked = tmp_path / "linked"
    subprocess.run(["cp", "-al", str(bundle.root), str(linked)], check=True)
    store = BundleStore(tmp_path / "root")
    version = store.add(linked, label="as installed", move=True)
    store.activate(version.id)
    from engines.vad import create_vad

    opened = Bundle.open(resolve_bundle_dir(store.root))
    assert (
        opened.root == version.path and opened.manifest.artifacts.keys() == bundle.manifest.artifacts.keys()
    )
    vad = create_vad(opened)
    vad.load()
    try:
        import numpy as np

        assert 0.0 <= vad.stream().probability(np.zeros(512, np.float32)) <= 1.0
    finally:
        vad.close()


def test_the_commands_list_activate_roll_back_and_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from appliance.cli import main

    root = _bundle(tmp_path / "root", "plain")
    assert main(["bundle", "list", "--dir", str(root)]) == 0
    assert "one unversioned bundle" in capsys.readouterr().out
    assert main(["bundle", "adopt", "--dir", str(root)]) == 0
    first = BundleStore(root).state().active
    assert first is not None
    second = BundleStore(root).add(_bundle(tmp_path / "new", "new"), label="candidate")
    assert main(["bundle", "activate", second.id[:5], "--dir", str(root)]) == 0
    assert f"active {second.id}, previous {first}" in capsys.readouterr().out
    assert main(["bundle", "list", "--dir", str(root)]) == 0
    listing = capsys.readouterr().out
    assert f"active    {second.id}" in listing and f"previous  {first}" in listing and "candidate" in listing
    assert main(["bundle", "remove", second.id, "--dir", str(root)]) == 1
    assert "is the active one and stays" in capsys.readouterr().err
    assert main(["bundle", "rollback", "--dir", str(root)]) == 0
    assert BundleStore(root).state().active == first
    assert main(["bundle", "verify", str(root)]) == 0
    assert "OK (1 artifacts verified)" in capsys.readouterr().out
    assert main(["bundle", "activate", "ffffff", "--dir", str(root)]) == 1
    assert "is not in" in capsys.readouterr().err


def test_a_version_that_cannot_load_is_rolled_back_at_the_daemons_start(
    bundle: Bundle, tmp_path: Path
) -> None:
    """The real daemon start (``load_with_fallback``) on a versioned root whose active version has a
    truncated language model: the previous version runs, and the journal, STATUS banner and /metrics
    source say so."""
    from appliance.config import load_settings, override
    from appliance.daemon import service as appliance_daemon
    from appliance.daemon.start_plan import StartPlan

    store = BundleStore(tmp_path / "root")
    good_copy, bad_copy = tmp_path / "good", tmp_path / "bad"
    subprocess.run(["cp", "-al", str(bundle.root), str(good_copy)], check=True)
    subprocess.run(["cp", "-al", str(bundle.root), str(bad_copy)], check=True)
    manifest = Manifest.read(bad_copy)
    art = manifest.artifacts["llm/gemma-270m"]
    model = bad_copy / art.path
    half = model.read_bytes()[: art.size_bytes // 2]
    model.unlink()  # a hard link to the installed file: replaced, not written through
    model.write_bytes(half)
    manifest.add(Artifact(art.name, art.path, art.kind, sha256_of(model), len(half), art.source, art.build))
    manifest.write(bad_copy)
    good = store.add(good_copy, label="as installed", move=True)
    bad = store.add(bad_copy, label="truncated", move=True)
    store.activate(good.id)
    store.activate(bad.id)
    settings = override(
        load_settings(None),
        bundle={"dir": str(store.root), "verify_on_start": False},
        llm={"model": "gemma-270m", "context_tokens": 512, "max_reply_tokens": 16},
        audio={"input": "none", "output": "none"},
    )
    plan = StartPlan(settings, None, None, "audio.input is none", None)
    daemon = appliance_daemon.load_with_fallback(plan, config_path=None)
    try:
        assert store.state().active == good.id and store.state().previous == bad.id
        assert daemon.notice is not None and f"version {bad.id} failed to load" in daemon.notice
        assert daemon.bundle.version == good.id and daemon.bundle.rolled_back_from == bad.id
    finally:
        appliance_daemon.close(daemon)


def test_a_version_that_keeps_crashing_the_daemon_is_rolled_back_at_its_next_start(
    bundle: Bundle, tmp_path: Path
) -> None:
    """``appliance run`` killed (-9) three times while starting on a new version: the fourth start runs
    the previous version, says so, and its clean stop is not counted as a crash."""
    import json
    import os
    import signal
    import sys
    import time

    from tests.test_service import FakeSystemd

    store = BundleStore(tmp_path / "root")
    old_copy, new_copy = tmp_path / "old", tmp_path / "new"
    for copy, release in ((old_copy, "old"), (new_copy, "new")):
        subprocess.run(["cp", "-al", str(bundle.root), str(copy)], check=True)
        manifest = Manifest.read(copy)
        manifest.meta["release"] = release
        (copy / "manifest.json").unlink()  # a hard link to the installed one: replaced, not written through
        manifest.write(copy)
    old = store.add(old_copy, move=True)
    new = store.add(new_copy, move=True)
    store.activate(old.id)
    store.activate(new.id)
    env = {
        **os.environ,
        "APPLIANCE_BUNDLE__DIR": str(store.root),
        "APPLIANCE_BUNDLE__VERIFY_ON_START": "false",
        "APPLIANCE_AUDIO__INPUT": "none",
        "APPLIANCE_LLM__MODEL": "gemma-270m",
        "APPLIANCE_TRACE__DB_PATH": str(tmp_path / "turns.sqlite3"),
    }
    env.pop("JOURNAL_STREAM", None)
    command = [str(Path(sys.prefix) / "bin" / "appliance"), "run"]
    starts = store.root / "starts.json"

    def recorded(pid: int) -> list[dict[str, object]]:
        try:
            return [s for s in json.loads(starts.read_text())["starts"] if s["pid"] == pid]
        except (OSError, ValueError):
            return []

    for _ in range(3):
        with subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ) as starting:
            deadline = time.monotonic() + 120
            while not recorded(starting.pid) and starting.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            starting.send_signal(signal.SIGKILL)
        assert [s["version"] for s in recorded(starting.pid)] == [new.id]
    assert store.state().active == new.id

    fake = FakeSystemd(str(tmp_path / "notify.sock"))
    try:
        with subprocess.Popen(
            command,
            env={**env, "NOTIFY_SOCKET": fake.address},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            try:
                fake.wait_for("READY=1", timeout_s=300)
                proc.send_signal(signal.SIGTERM)
                output, _ = proc.communicate(timeout=60)
            finally:
                proc.kill()
    finally:
        fake.close()
    assert proc.returncode == 0, output
    assert store.state().active == old.id and store.state().previous == new.id
    assert f"version {new.id} brought the daemon down 3 times" in output
    assert any("degraded" in m and "rolled back" in m for m in fake.messages), fake.messages
    assert recorded(proc.pid) == []  # stopped as asked: not a crash
