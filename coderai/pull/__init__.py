"""Models fetched from a Hugging Face hub: what a request names (plan.py) and its download
into the hub's own cache (download.py)."""
