"""Comparing runs: two runs layer by layer with their heatmaps (pair.py), 2-8 runs side by side (actions.py);
routes.py, schemas.py."""
