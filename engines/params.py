"""The base of every component's parameter object.

Each engine and pipeline component declares its settings once, as a frozen model in its own package:
the field's type, its limits, its one default and its description. The appliance's configuration
is composed of these objects (``appliance/config.py``), so a component built with its own defaults
behaves like the daemon with the shipped configuration, and ``appliance config default`` writes the
shipped file from the descriptions.

Durations are given in the unit their name ends with (``_ms``, ``_s``); a component reads a ``_ms``
value in seconds through the object's ``*_s`` property, the one place the unit changes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """A component's settings: unknown keys are refused, values are checked, nothing changes after."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def ms_to_s(value_ms: float) -> float:
    return value_ms / 1000.0
