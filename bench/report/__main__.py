"""`python -m bench.report`: rebuild bench/REPORT.md and its plots (build.py)."""

from bench.report.build import main

if __name__ == "__main__":
    raise SystemExit(main())
