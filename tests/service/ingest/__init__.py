"""Tests of service/ingest/: the archive reader, the ingest job queue, bad uploads and failure paths."""
