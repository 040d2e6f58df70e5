"""A blind transfer: the name of where it goes, as a sentence says it, and a transfer that did not put
the caller through, as it travels from SIP (the REFER and its NOTIFYs) through the call's audio to
the session's call policy: the call goes on."""

from __future__ import annotations

# Departments a receptionist names without "the" ("I'll put you through to reception"); a role or a
# desk takes it ("to the shift supervisor"), a person's name (capitalised) does not.
_NO_ARTICLE = frozenset(
    {
        "reception",
        "security",
        "maintenance",
        "sales",
        "support",
        "accounts",
        "accounting",
        "payroll",
        "purchasing",
        "shipping",
        "dispatch",
        "logistics",
        "engineering",
        "quality",
        "finance",
        "admin",
        "administration",
        "facilities",
        "hr",
        "it",
        "housekeeping",
        "catering",
        "billing",
        "customer-service",
        "first-aid",
        "human-resources",
    }
)
_ARTICLES = ("the ", "a ", "an ", "our ", "your ")


def spoken_target(name: str) -> str:
    """``name`` of call.transfer_targets as a sentence says it: "shift supervisor" -> "the shift
    supervisor"; "reception", "Anna Berg", "the front desk" as they are."""
    words = name.strip()
    key = words.lower().replace(" ", "-")
    if not words or words.lower().startswith(_ARTICLES) or key in _NO_ARTICLE or words[0].isupper():
        return words
    return f"the {words}"


class TransferFailed(Exception):
    """Why the caller was not put through (said in the log; the caller hears the site's sentence)."""
