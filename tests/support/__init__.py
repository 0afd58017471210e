"""Test helpers shared across the test folders (no tests here): archives and logs to upload, the throwaway
PostgreSQL cluster and S3 server, the app served on loopback, auth and database helpers, the xdist scheduling.

A helper used by one test folder only stays beside its tests (tests/policy/te_logs.py, tests/client/fakes.py)."""
