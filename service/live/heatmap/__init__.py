"""A live run's heatmap from the statistics received so far: routes.py, schemas.py, actions.py (the parsed points
kept per run between polls)."""
