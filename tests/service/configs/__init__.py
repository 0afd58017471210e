"""Tests of service/configs/: rendered configs kept with their run."""
