"""Atomic writes: never half a file, the mode kept, and what a killed writer left behind cleaned up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from engines.files import atomic_write, loads_toml


def test_atomic_write_keeps_the_old_mode_and_gives_a_new_file_the_asked_one(tmp_path: Path) -> None:
    target = tmp_path / "site.toml"
    atomic_write(target, "a = 1\n", mode=0o600)
    assert target.stat().st_mode & 0o777 == 0o600
    atomic_write(target, b"a = 2\n")
    assert target.stat().st_mode & 0o777 == 0o600 and loads_toml(target.read_text()) == {"a": 2}


def test_a_writer_killed_mid_write_leaves_the_old_file_and_its_leftover_is_cleaned_later(
    tmp_path: Path,
) -> None:
    target = tmp_path / "site.toml"
    atomic_write(target, "a = 1\n")
    # A real writer killed by SIGKILL between creating its temporary file and the rename.
    code = (
        "import os, tempfile, time; from pathlib import Path; "
        f"fd, tmp = tempfile.mkstemp(dir={str(tmp_path)!r}, prefix='.site.toml.', suffix='.tmp'); "
        "os.write(fd, b'a = '); print(tmp, flush=True); time.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as writer:
        assert writer.stdout is not None
        leftover = Path(writer.stdout.readline().strip())
        writer.kill()
    assert leftover.exists() and target.read_text() == "a = 1\n"
    fresh = tmp_path / ".site.toml.fresh.tmp"  # a writer still at work: left alone
    fresh.write_text("x")
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    atomic_write(target, "a = 3\n")
    assert not leftover.exists() and fresh.exists()
    assert target.read_text() == "a = 3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".site.toml.fresh.tmp", "site.toml"]
