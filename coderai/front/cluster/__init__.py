"""Other machines on the bus: the front's CURVE-secured ROUTER for remote engines and
nodes, and a node's uplink to its head."""
