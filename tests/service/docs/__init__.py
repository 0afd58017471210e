"""Tests of service/docs/: the /docs page served by the app itself."""
