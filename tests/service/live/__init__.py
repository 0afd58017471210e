"""Tests of service/live/: live runs received piece by piece and their events."""
