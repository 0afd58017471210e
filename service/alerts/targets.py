"""Where a webhook may point: its URL parsed as the sender parses it, and the addresses a delivery may reach.

A webhook is a URL an admin types and the service then POSTs to from inside its own network, so it must not
become a way to reach what only the service can reach (server-side request forgery,
https://owasp.org/www-community/attacks/Server_Side_Request_Forgery):

* link-local and cloud-metadata addresses (169.254.0.0/16 with AWS/GCP/Azure's 169.254.169.254, fe80::/10, AWS's
  IPv6 metadata fd00:ec2::254, Alibaba Cloud's 100.100.100.200), multicast, reserved and unspecified ones are
  always refused;
* loopback, private and other non-public ranges only when the service runs with
  `FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1` (a team's internal chat proxy, a test's receiver on 127.0.0.1).

A host that ends in a number but is no dotted-decimal address (`2852039166`, `0x7f000001`, `127.1`, `0177.0.0.1`)
is refused when the rule is created: the system resolver (glibc's `inet_aton`) reads those as the address they
encode (2852039166 is 169.254.169.254), and the WHATWG URL standard makes such a host an IPv4 address or a failure
("ends in a number", https://url.spec.whatwg.org/#ends-in-a-number-checker); written as a.b.c.d the address is
judged as any other.

A rule is checked when it is created (a literal address, or a `localhost` name) and every delivery again at send
time, after DNS resolution: the request then goes to the address that was checked (`pinned`), so a name that
resolves elsewhere the second time (DNS rebinding) reaches nothing new. IPv4 addresses written inside IPv6
(::ffff:a.b.c.d, NAT64 64:ff9b::/96) are judged as the IPv4 address they carry.

Belongs here: parsing and judging targets. Sending is service/alerts/sender.py's; rule validation around it
service/alerts/actions.py's.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8_policy.service import limits
from fp8_policy.service.errors import InvalidWebhook

if TYPE_CHECKING:  # httpx is imported where a webhook is parsed, not when the service starts (issue 21)
    import httpx

MAX_URL_CHARS = 2000
ALLOW_PRIVATE_HINT = "set FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1 on the service to allow loopback and private targets"
_ALWAYS_REFUSED = tuple(
    ipaddress.ip_network(net) for net in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
RESOLVE_SECONDS = 5.0
_resolvers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")  # getaddrinfo has no timeout

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class RefusedTarget(Exception):
    """A delivery's target resolves to an address webhooks may not reach (or to none)."""


def parse_webhook(url: str, *, allow_private: bool) -> httpx.URL:
    """The webhook URL as the sender will use it, or 400 `InvalidWebhook`: http(s), a host, a numeric port,
    text within the limits, and not a literal address (or `localhost`) that `address_problem` refuses."""
    import httpx

    limits.check_text("webhook", url, MAX_URL_CHARS, error=InvalidWebhook)
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
        raise InvalidWebhook(f"webhook is not a URL the sender can use ({type(exc).__name__})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidWebhook(f"webhook must be an http(s) URL with a host, at most {MAX_URL_CHARS} characters")
    if port is not None and not 1 <= port <= 65535:
        raise InvalidWebhook("webhook port must be a number from 1 to 65535")
    host = parsed.host.rstrip(".").lower()
    address = _literal(host)
    if address is None and _ends_in_a_number(host):
        raise InvalidWebhook(
            f"webhook host {host[:60]!r} ends in a number but is no dotted-decimal address (a resolver reads "
            "decimal, hex and octal forms as an IPv4 address): write the address as a.b.c.d"
        )
    if address is None and (host == "localhost" or host.endswith(".localhost")):  # RFC 6761: always loopback
        address = ipaddress.ip_address("127.0.0.1")
    problem = address_problem(address, allow_private=allow_private) if address is not None else None
    if problem:
        raise InvalidWebhook(f"webhook host is {problem}: refused")
    return parsed


def address_problem(address: Address, *, allow_private: bool) -> str | None:
    """Why a delivery may not go to `address` (None: it may)."""
    address = _embedded_ipv4(address)
    if address.is_link_local or any(address in net for net in _ALWAYS_REFUSED if net.version == address.version):
        return "a link-local or cloud-metadata address"
    if address.is_multicast or address.is_unspecified:
        return "not a unicast host address"
    private = address.is_loopback or address.is_private  # ::1 is also in the reserved ::/8
    if not private and address.is_reserved:
        return "not a unicast host address"
    if (private or not address.is_global) and not allow_private:
        return f"a loopback or private address ({ALLOW_PRIVATE_HINT})"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA records), as the operating system resolves it, within
    RESOLVE_SECONDS (TimeoutError beyond: a name that resolves slowly delays only its own delivery this long)."""
    lookup = _resolvers.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = lookup.result(timeout=RESOLVE_SECONDS)
    except FutureTimeout:
        raise TimeoutError(f"no address within {RESOLVE_SECONDS:g} s") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class PinnedRequest:
    """A webhook request that goes to one checked address, keeping the name for the Host header and TLS."""

    url: httpx.URL
    headers: dict[str, str]
    extensions: dict[str, Any]


def pinned(url: str, *, allow_private: bool, resolver: Resolver = system_resolver) -> PinnedRequest:
    """Resolve the webhook's host now and check every address it has (one refused address refuses the name: the
    resolver, not this service, picks which one a connection would use); the request then goes to the first.
    RefusedTarget when refused, httpx.InvalidURL / OSError (socket.gaierror) when it cannot be resolved."""
    try:
        parsed = parse_webhook(url, allow_private=allow_private)
    except InvalidWebhook as exc:  # a rule stored before these checks, or by another version
        raise RefusedTarget(exc.detail) from None
    host = parsed.raw_host.decode("ascii")  # IDNA-encoded, as DNS and TLS see it
    literal = _literal(host)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    if literal is not None:
        addresses: list[Address] = [literal]
    else:
        addresses = [ipaddress.ip_address(found.split("%")[0]) for found in resolver(host, port)]
    if not addresses:
        raise RefusedTarget("the webhook's host has no address")
    for address in addresses:
        problem = address_problem(address, allow_private=allow_private)
        if problem:
            raise RefusedTarget(f"the webhook's host resolves to {problem}: refused")
    if literal is not None:
        return PinnedRequest(parsed, {}, {})
    netloc = parsed.netloc.decode("ascii")  # host[:port] as the URL spells it (IDNA-encoded)
    return PinnedRequest(
        parsed.copy_with(host=str(addresses[0])),
        {"Host": netloc},
        {"sni_hostname": host} if parsed.scheme == "https" else {},
    )


_NUMBER_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


def _ends_in_a_number(host: str) -> bool:
    """The WHATWG URL standard's "ends in a number checker": the last label is decimal digits or 0x-hex."""
    return _NUMBER_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is not None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _embedded_ipv4(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address
