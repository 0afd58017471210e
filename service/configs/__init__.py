"""Rendered configs kept with a run (keep, list, download): routes.py, schemas.py, actions.py."""
