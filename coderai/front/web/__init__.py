"""The web, as Anthropic's server tools reach it (api/anthropic/server_tools.py): searches
through a SearXNG instance the operator runs (`searxng.py`) and pages fetched by the
front itself (`page.py`), each within the limits of the config's `search` section."""
