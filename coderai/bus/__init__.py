"""The bus: wire messages, their codec and socket helpers shared by the front and engines."""
