"""OpenAI's chat completions, completions, models and tokenize routes: request bodies,
reply shapes, several choices."""
