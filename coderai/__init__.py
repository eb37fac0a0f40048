"""CoderAI: a local-first LLM inference server (front + engines over a ZeroMQ bus)."""

__version__ = "0.1.0"
