"""Other machines on the bus: the front's CURVE-secured ROUTER for remote engines and
nodes (`router.py`), and a node's uplink to its head (`uplink.py`, `node.py`)."""
