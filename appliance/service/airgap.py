"""The daemon's air gap at the resolver: no name is looked up except the hosts a technician allowed.

``engines.net.NameLookupGuard`` does the refusing; here it is installed for the daemon's life with a
log that a flood of refused lookups (one per RTP packet, say) cannot fill.
"""

from __future__ import annotations

import logging

from appliance.ratelog import ThrottledLog
from engines.net import NameLookupGuard

log = logging.getLogger(__name__)


def guard_name_lookups() -> NameLookupGuard:
    noisy = ThrottledLog(log)

    def refused(host: str, where: str) -> None:
        noisy.log(
            logging.WARNING,
            "name_lookup",
            "name lookup of %r refused (%s): only the hosts in llm_server.allowed_hosts and agent.allowed_hosts "
            "are ever resolved; use an IP address",
            host,
            where,
        )

    guard = NameLookupGuard(refused)
    guard.install()
    return guard
