"""The client's HTTP transport (client/_http.py `_TlsWhenAsked`): plain HTTP loads no CA bundle (45-75 ms of CPU per
command), HTTPS is verified as httpx verifies it, from the first https request on."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fp8_policy.client import PolicyClient
from fp8_policy.client.errors import ConnectionFailed
from tests.support.local_http import serving


class _Runs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"items": [], "next_cursor": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def _serve(server: ThreadingHTTPServer) -> Iterator[str]:
    with serving(server) as port:
        yield f"127.0.0.1:{port}"


@pytest.fixture
def http_service() -> Iterator[str]:
    yield from _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Runs))


@pytest.fixture
def https_service(tmp_path: Path) -> Iterator[str]:
    """The same service over TLS with a self-signed certificate for 127.0.0.1, which no CA bundle trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Runs)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    yield from _serve(server)


@pytest.fixture
def ca_loads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every CA bundle or directory an SSL context loads from here on (httpx loads certifi's by default)."""
    loaded: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def spy(self: ssl.SSLContext, cafile: object = None, capath: object = None, cadata: object = None) -> None:
        loaded.append(cafile or capath or "cadata")
        original(self, cafile, capath, cadata)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", spy)
    return loaded


def test_plain_http_loads_no_ca_bundle(http_service: str, ca_loads: list[object]) -> None:
    with PolicyClient(f"http://{http_service}") as client:
        assert client.runs()["items"] == []

    assert ca_loads == []


def test_https_is_verified_and_a_certificate_no_ca_signed_is_refused(https_service: str, ca_loads) -> None:
    with PolicyClient(f"https://{https_service}") as client, pytest.raises(ConnectionFailed) as refused:
        client.runs()

    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value) or "certificate verify failed" in str(refused.value)
    assert len(ca_loads) == 1  # the verifying transport, built at the first https request


def test_https_with_the_certificate_trusted_through_ssl_cert_file_is_answered(
    https_service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_FILE, which httpx honours, still picks the trusted CAs: the https transport is httpx's own."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    with PolicyClient(f"https://{https_service}") as client:
        assert client.runs()["items"] == []
