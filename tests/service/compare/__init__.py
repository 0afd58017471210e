"""Tests of service/compare/: comparing two runs through the API."""
