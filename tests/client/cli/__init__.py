"""Tests of client/cli/: the `fp8-policy` client commands, through click's CliRunner against a mock transport or the
real service."""
