"""Facts about network addresses that policy depends on (pure: no lookups, no IO)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name, an IPv4 or a bracketed or bare IPv6 address) is loopback.

    Only ``localhost`` is trusted by name; any other name counts as non-loopback, so a
    listener bound to it needs credentials.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
