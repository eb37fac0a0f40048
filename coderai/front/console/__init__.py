"""The operator's console: admin, settings, logs, status, accounts and OpenAPI routes, its
live events, activity, and its web files."""
