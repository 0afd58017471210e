"""Tests of policy/synthetic/: the planted-pattern run generator."""
