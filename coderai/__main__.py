import sys

# an engine process starts without the other commands' imports (engine_main.py says why)
if sys.argv[1:2] in (["engine"], ["--engine-only"]):
    from coderai.engine_main import main
else:
    from coderai.cli import main

raise SystemExit(main())
