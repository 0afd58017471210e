"""Tests of policy/heatmap/: the heatmap matrix and geometry."""
