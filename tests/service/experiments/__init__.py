"""Tests of service/experiments/: measured experiment arms of a run."""
