"""What the front and the engines both use, and neither owns: the choice of models to
evict, a process's exit in words, a log line that cannot flood, JSON files read and
written whole, what pydantic found wrong told to a person, and the JSON-schema grammars
of structured output (the front checks schemas with them, engines apply them). Imports
neither side, nor the command line."""
