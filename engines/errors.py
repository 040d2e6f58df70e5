"""The engines' exception tree.

EngineError                 code
├── BackendUnavailable      backend-unavailable   runtime package or hardware missing
├── ModelFileError          model-file            missing, truncated or wrong model file
├── BundleError             bundle                manifest missing or a file altered
└── InputError              bad-input             audio or text that cannot be processed
"""

from __future__ import annotations


class EngineError(Exception):
    code = "engine"

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.fix = fix
        super().__init__(f"{message} (fix: {fix})" if fix else message)


class BackendUnavailable(EngineError):
    code = "backend-unavailable"


class ModelFileError(EngineError):
    code = "model-file"


class BundleError(EngineError):
    code = "bundle"


class InputError(EngineError):
    code = "bad-input"
