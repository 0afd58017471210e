"""Tests of service/auth/: tokens, scopes on every route, the token CLI."""
