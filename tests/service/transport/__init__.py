"""Tests of service/transport/: serving while starting and stopping within bound."""
