"""The AISBF broker uplink: the wire messages, the WebSocket client, and what the node
answers."""
