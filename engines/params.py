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


SENTENCE_MAX_CHARS = 300  # a sentence said aloud; a longer one is a mistake, or a log flood


def check_sentence(value: str, placeholders: tuple[str, ...] = ()) -> str:
    """A sentence the appliance says, filled in with ``str.format``: only the bare ``placeholders`` may
    appear (no format spec, conversion or attribute: ``{target:>100000000}`` would write 100 MB a call,
    ``{target:d}`` fail every call), at most ``SENTENCE_MAX_CHARS``, and no line breaks (it may reach a
    SIP header or the log). Raises ValueError with the fix."""
    import string

    if "\r" in value or "\n" in value:
        raise ValueError("must be one line (no line breaks)")
    if len(value) > SENTENCE_MAX_CHARS:
        raise ValueError(
            f"is {len(value)} characters long; a sentence said aloud may have {SENTENCE_MAX_CHARS}"
        )
    allowed = ", ".join("{" + name + "}" for name in placeholders) or "none"
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(value)
            if name is not None
        ]
        for name, spec, conversion in fields:
            if name not in placeholders:
                raise ValueError(
                    f"{{{name}}} is not a placeholder this sentence can use (it can use: {allowed}); "
                    "write a brace itself as {{ or }}"
                )
            if spec or conversion is not None:
                written = (
                    "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                )
                raise ValueError(
                    f"{written} has a format of its own; write the placeholder bare, as {{{name}}} "
                    "(a placeholder in this sentence is the word itself)"
                )
    except ValueError as err:
        if "placeholder" in str(err):
            raise
        raise ValueError(f"unbalanced braces ({err}); write a brace itself as {{{{ or }}}}") from None
    return value


def check_ip_address(value: str) -> str:
    """A listening or advertised address must be a number: the device resolves no names."""
    import ipaddress

    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address (this device looks up no names): use one of its own "
            "addresses, 127.0.0.1, or 0.0.0.0 for every interface"
        ) from None
    return value
