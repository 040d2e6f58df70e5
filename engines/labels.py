"""A label: a value that leaves the module that makes it (a trace field, a /metrics label, the admin
page). Each kind is one enum, defined once; its members compare equal to their strings, so stored
records and JSON keep the plain values."""

from __future__ import annotations

from enum import Enum


class Label(str, Enum):
    def __str__(self) -> str:
        return self.value
