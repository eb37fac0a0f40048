"""Prompts for the real models: plain, numeric and non-ASCII text, and long ones."""

PROMPTS = [
    "What is the capital of France?",
    "Hello there",
    "Numbers like 1, 2 and 42",
    "Servers answer requests",
    "é and 東京",
]


#: the words of long_prompt
_WORDS = ("server", "engine", "stream", "token", "prompt", "cache", "model", "agent", "socket",
          "queue")  # fmt: skip


def long_prompt(words: int, step: int) -> str:
    """About `words` tokens of prose-like text, its word order set by `step`: prompts of
    different steps share no prefix, so none is read from another's prefix cache."""
    text = " ".join(_WORDS[(i * step) % len(_WORDS)] for i in range(words))
    return text + "\nSummarise."
