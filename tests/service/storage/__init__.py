"""Tests of service/storage/: the archive store (local directory, S3)."""
