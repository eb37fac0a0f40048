"""What shapes a sequence's output whatever the backend: chat templates, stop sequences,
structured output and its constraints, tool-call parsing."""
