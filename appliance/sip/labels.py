"""The SIP side's labels that leave it: on the admin page, /api/status and /metrics."""

from __future__ import annotations

from engines.labels import Label


class RegistrationState(Label):
    """Where the extension stands with the site's phone system (``sip.registrar``)."""

    OFF = "off"  # no registrar configured, or stopped
    REGISTERING = "registering"
    REGISTERED = "registered"
    FAILING = "failing"  # refused or unanswered; tried again later
