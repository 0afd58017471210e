"""Hardening tests that cut across the features: attack replays, schema-driven fuzzing, property tests of the edge
checks, input limits, cross-site protection, and behaviour under load (read load, trickling uploads, the event
loop, connection limits, a scaled-out cluster).

One folder rather than `attacks/` and `load/`: the two kinds are the same exercise (one client trying to break the
service for the others), go through every layer at once (transport, auth, limits, ingest, storage), share the real
server on loopback (tests/support/uvicorn_app.py, test_transport_limits.py's `serve_process`), and are the folder
to run after a change to the service's bounds.
"""
