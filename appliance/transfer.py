"""A blind transfer that did not put the caller through, as it travels from SIP (the REFER and its
NOTIFYs) through the call's audio to the session's call policy: the call goes on."""

from __future__ import annotations


class TransferFailed(Exception):
    """Why the caller was not put through (said in the log; the caller hears the site's sentence)."""
