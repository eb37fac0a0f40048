"""The front's durable state beside config.json: users, sessions, API keys and usage, in
one SQLite database (WAL), so a crash never leaves it half-written. Torch-free: the front
and the `coderai users` / `coderai keys` commands both use it."""
