"""The training scalars of every run, live or uploaded: kept with the run (actions.py), served (routes.py)."""
