"""What the tests share: a real `coderai run` to drive, engine peers on the bus, one SSE
parser."""
