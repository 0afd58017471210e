"""Tests of service/runs/: the runs API (upload, list, get, edit, delete) and orphaned uploads."""
