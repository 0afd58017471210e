"""Tests of service/scalars/: training scalars kept with a run and served from it."""
