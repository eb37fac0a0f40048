"""Who may call what and how much: the gate, the login guard, per-key limits, usage, and
the state database they share."""
