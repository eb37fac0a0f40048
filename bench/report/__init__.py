"""The report builders: bench/REPORT.md and bench/plots/*.png from bench/results/*.json.

    python -m bench.report [--out DIR]

build.py puts the report together; each other module renders the sections of one
benchmark (agents.py: bench/agents.py's, soak.py: bench/soak.py's, ...), with table.py's
Markdown tables and plot.py's line plots.
"""
