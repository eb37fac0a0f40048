"""The `coderai` command line: `main.py` lists the commands, each in its own module imported
only when it runs (`run`, `engine`, `users` and `keys` in accounts.py, `cluster`, `launch`,
`models`), and what they share: the config file they read, the running server as they reach
it. `inprocess.py` joins front and engine for `coderai run --single-process`: the one place
that imports both. Nothing else in coderai imports this package."""
