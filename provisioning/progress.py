"""A progress bar for long steps whose length is not known in advance (elapsed time ticking)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm


@contextmanager
def elapsed_bar(description: str, *, enabled: bool = True, tick_s: float = 0.5) -> Iterator[None]:
    """Show ``description`` with the elapsed time while the block runs."""
    if not enabled:
        yield
        return
    stop = threading.Event()
    with tqdm(desc=description, bar_format="{desc}: {elapsed}", leave=True) as bar:

        def tick() -> None:
            while not stop.wait(tick_s):
                bar.refresh()

        ticker = threading.Thread(target=tick, name="progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
