"""The uvicorn options the service runs with (`fp8-policy serve`, the tests' and the benchmark's live servers).

Descriptor budget: every open connection costs one file descriptor, an upload one more (its `.part` file), every
pooled database connection one; the rest of the process (interpreter, shared libraries, the SQLite file and its
WAL, fonts, ingest work files, render workers' pipes) is covered by `RESERVED_DESCRIPTORS`. The connection limit
is chosen so that the sum stays under `ulimit -n`: the process then answers 503 instead of failing with
"Too many open files" whatever clients do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource

import uvicorn
from fastapi import FastAPI

from fp8_policy.service.settings import Settings
from fp8_policy.service.transport.protocol import GuardedH11Protocol

log = logging.getLogger("fp8_policy.transport")

RESERVED_DESCRIPTORS = 256
DEFAULT_CONNECTIONS = 1024
MIN_CONNECTIONS = 16
KEEP_ALIVE_SECONDS = 5  # uvicorn's default, stated here because the head timeout is documented relative to it


def raise_descriptor_limit(target: int = 65536) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit (a process may do so without privileges); returns the
    soft limit in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def connection_limit(settings: Settings, descriptors: int) -> int:
    """Open connections allowed: the configured `limit_concurrency` (default 1024), lowered to what the
    descriptor budget leaves after the database pools (requests, background work), the uploads' files and
    the reserve."""
    pool, background = settings.pool_options(), settings.background_pool_options()
    budget = (
        descriptors
        - RESERVED_DESCRIPTORS
        - int(pool["pool_size"] + pool["max_overflow"])
        - int(background["pool_size"] + background["max_overflow"])
        - settings.max_concurrent_uploads
    )
    wanted = settings.limit_concurrency or DEFAULT_CONNECTIONS
    limit = max(MIN_CONNECTIONS, min(wanted, budget))
    if limit < wanted:
        log.warning("limit_concurrency lowered from %d to %d: ulimit -n is %d", wanted, limit, descriptors)
    return limit


def guarded_protocol(header_timeout: float, max_connections: int | None) -> type[asyncio.Protocol]:
    """The protocol class to pass as uvicorn's `http=` option, with these limits: httptools' where it is installed,
    else h11's (`FP8_POLICY_HTTP_PARSER=h11` picks h11 anyway)."""
    base: type[asyncio.Protocol] = GuardedH11Protocol
    if os.environ.get("FP8_POLICY_HTTP_PARSER", "").strip().lower() != "h11":
        try:
            from fp8_policy.service.transport.protocol_httptools import GuardedHttpToolsProtocol
        except ImportError:  # no httptools wheel for this platform: h11 (pure Python)
            pass
        else:
            base = GuardedHttpToolsProtocol
    return type(
        base.__name__,
        (base,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )


def uvicorn_config(
    app: FastAPI,
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    descriptors: int | None = None,
) -> uvicorn.Config:
    """uvicorn's Config with the guarded HTTP protocol (head timeout, connection cap) and `limit_concurrency`."""
    if descriptors is None:
        descriptors = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if descriptors == resource.RLIM_INFINITY:
        descriptors = 1 << 20
    limit = connection_limit(settings, descriptors)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_protocol(settings.header_timeout, limit),
        limit_concurrency=limit,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
