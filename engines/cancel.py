"""A cancel flag that can also stop work already inside a native call.

Engines check ``is_set()`` between steps (LLM tokens, Whisper decoder steps). A single long native
call (ONNX Runtime running the Whisper encoder) cannot look at the flag, so it registers what stops it
(``on_set``): ONNX Runtime's ``RunOptions.terminate``. ``set()`` runs those callbacks at once, on the
thread that cancels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Cancelled(Exception):
    """The work was cancelled before it finished (not a failure)."""


class CancelEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._callbacks_lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the event is set (now, if it already is); returns the function
        that unregisters it."""
        with self._callbacks_lock:
            self._callbacks.append(callback)
        if self.is_set():
            callback()

        def unregister() -> None:
            with self._callbacks_lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unregister


def raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled()
