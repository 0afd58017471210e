"""Tests of policy/live/: the live detectors, their events and batch equivalence."""
