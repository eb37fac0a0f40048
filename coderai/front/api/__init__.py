"""The APIs the front serves, each translated to one chat job: OpenAI's, Anthropic's
Messages, OpenAI's Responses, and what they share (validation, relays, stream edges)."""
