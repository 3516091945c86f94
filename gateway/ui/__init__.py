"""The web chat page at /ui (routes.py; the page itself in static/)."""
