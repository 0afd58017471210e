"""Benchmark tooling: the synthetic benchmark log tree (generate) and the baseline we compare against (baseline).

Belongs here: scripts run by hand or by CI to measure speed and memory. Not imported by policy/, db/ or service/.
"""
