"""Reference designs measured beside CoderAI in the same run."""
