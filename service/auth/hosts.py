"""Which `Host` an open service (no access token in the database) answers: DNS rebinding cannot reach it.

A page on `http://attacker.example:8000` whose name the attacker then re-points at 127.0.0.1 (DNS rebinding,
https://en.wikipedia.org/wiki/DNS_rebinding) makes the victim's browser send requests to this service that are
same-origin for the browser: `Host` and `Origin` both say `attacker.example:8000`, so the cross-site checks of
service/security.py pass, and without tokens every request is served. An attack pass on loopback read runs,
created an outside webhook rule, edited a run and minted an admin token that locked the owner out.

So while the service is open, a request is served only when its `Host` names this machine the way no outside
page can (the check of Jupyter's `check_host`, jupyter_server/base/handlers.py, and of Django's ALLOWED_HOSTS):
* a loopback name: `localhost` and `*.localhost` (RFC 6761 §6.3: always loopback; browsers resolve them so
  themselves), or a loopback address (127.0.0.0/8, [::1]);
* any IP address: a browser sends an address as `Host` only for a page loaded from that address itself, so a
  rebinding page, which needs a name of its own, never sends one;
* a name the operator lists in `Settings.allowed_hosts` (`FP8_POLICY_ALLOWED_HOSTS`; `*` takes any).
A request without a `Host` (HTTP/1.0) comes from no browser and passes. With a token in the database this check
is not needed (a rebinding page has no token) and is not made. Anything else is 403 `HostNotAllowed`.

Belongs here: the rule. Applying it to every route that answers anonymously is service/auth/deps.py's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from fp8_policy.service.errors import HostNotAllowed

ANY_HOST = "*"


def host_name(host_header: str) -> str:
    """The name of a `Host` header: no port, no IPv6 brackets, no trailing dot, lower-case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    name, _, port = host.rpartition(":")
    if name and port.isascii() and port.isdigit():
        host = name
    return host.rstrip(".")


def normalise_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Settings.allowed_hosts as compared: names (a port given is ignored), `*` kept."""
    return frozenset(ANY_HOST if host.strip() == ANY_HOST else host_name(host) for host in hosts if host.strip())


def open_host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    """True when an open service may answer a request addressed to `host_header` (module docstring)."""
    if host_header is None or ANY_HOST in allowed:
        return True
    name = host_name(host_header)
    if name == "localhost" or name.endswith(".localhost") or name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def refusal(host_header: str) -> HostNotAllowed:
    shown = host_header.strip()[:100]
    return HostNotAllowed(
        f"this service has no access token yet, so it answers requests without one only when they are addressed "
        f"to localhost or an IP address, not to {shown!r} (a page on another name could be a DNS-rebinding "
        "attack); the operator lists names to answer in FP8_POLICY_ALLOWED_HOSTS, or creates a token: "
        "`fp8-policy token create --name NAME --scope admin`"
    )
