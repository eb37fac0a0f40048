"""OpenAI's Responses API: its routes, its request translated to a chat job, its reply
rendered from the job's output."""
