"""Prompts for the tiny real models: plain, numeric and non-ASCII text."""

PROMPTS = [
    "What is the capital of France?",
    "Hello there",
    "Numbers like 1, 2 and 42",
    "Servers answer requests",
    "é and 東京",
]
