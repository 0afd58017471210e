"""Whether a service bound to an address may serve requests without a token (checked by `fp8-policy serve`).

Zero configuration stays: on a loopback address, with no token in the database, anyone on the machine may use
the API, as with `make run`. On any other address that would hand uploads and deletions to the network, so the
service refuses to start there without a token unless `--allow-anonymous` says so explicitly.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; every other name or address (0.0.0.0, ::, a LAN IP) is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def anonymous_allowed(host: str, allow_anonymous_flag: bool) -> bool:
    """Requests without a token are served (while no token exists) on loopback or when explicitly allowed."""
    return allow_anonymous_flag or is_loopback(host)


def refusal(host: str, allow_anonymous_flag: bool, tokens_exist: bool) -> str | None:
    """The one line `serve` prints before exiting, or None when it may start."""
    if tokens_exist or anonymous_allowed(host, allow_anonymous_flag):
        return None
    return (
        f"error: refusing to serve on {host} without access tokens: anyone who can reach it could upload and "
        "delete runs. Create one first (`fp8-policy token create --name NAME --scope admin`), or pass "
        "--allow-anonymous to serve without tokens."
    )
