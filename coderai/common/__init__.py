"""What the front and the engines both use, and neither owns: the choice of models to
evict, a process's exit in words, a log line that cannot flood, JSON files read and
written whole, and what pydantic found wrong told to a person. Imports neither side, nor
the command line."""
