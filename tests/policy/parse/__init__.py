"""Tests of policy/parse/: the statistics, metadata and scalars readers and their compiled kernels."""
