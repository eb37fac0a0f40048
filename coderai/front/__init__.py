"""The front: aiohttp HTTP/SSE server and bus dispatcher. Never imports the model stack."""
