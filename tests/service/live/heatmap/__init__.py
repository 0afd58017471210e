"""Tests of service/live/heatmap/: a live run's growing heatmap."""
