"""Tests of service/analysis/: GET /analysis and GET|POST /recommendation (summaries, cache, frontier, schedule, stages)."""
