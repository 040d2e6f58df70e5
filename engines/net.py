"""Which hosts the device may reach: the air gap's exceptions are named hosts and networks only."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """``host`` is listed by name (case-insensitive), or is an address inside a listed network."""
    host = host.lower().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in allowed:
        entry = entry.lower().strip()
        if entry == host:
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def is_private_address(address: str) -> bool:
    """A loopback, link-local or private (RFC 1918, ULA) address: one on the site's own network."""
    ip = ipaddress.ip_address(address)
    return ip.is_private or ip.is_loopback or ip.is_link_local
