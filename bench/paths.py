"""Where the benchmarks read and write, the same from any folder: the shared recordings
(``APPLIANCE_TEST_DATA``, else ``../shared/data`` beside the checkout) and the results
(``APPLIANCE_BENCH_RESULTS``, else ``~/.cache/appliance/bench-results``: never the source tree)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("APPLIANCE_TEST_DATA", REPO.parent / "shared" / "data"))
RESULTS = Path(os.environ.get("APPLIANCE_BENCH_RESULTS", "~/.cache/appliance/bench-results")).expanduser()
