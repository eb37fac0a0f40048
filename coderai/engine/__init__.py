"""Engine processes: DEALER workers that run generation jobs for the front."""
