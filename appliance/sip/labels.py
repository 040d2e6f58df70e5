"""The SIP side's labels that leave it: on the admin page, /api/status and /metrics."""

from __future__ import annotations

from engines.labels import Label


class Availability(Label):
    """Whether a call can be taken now, as OPTIONS answers it (``X-Appliance-State``) for a proxy."""

    READY = "ready"
    FULL = "full"  # sip.max_calls in progress
    LOADING = "loading"  # the engines are still loading (or switching)


class RegistrationState(Label):
    """Where the extension stands with the site's phone system (``sip.registrar``)."""

    OFF = "off"  # no registrar configured, or stopped
    REGISTERING = "registering"
    REGISTERED = "registered"
    FAILING = "failing"  # refused or unanswered; tried again later
