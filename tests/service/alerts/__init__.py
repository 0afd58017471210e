"""Tests of service/alerts/: alert rules, matching and webhook delivery."""
