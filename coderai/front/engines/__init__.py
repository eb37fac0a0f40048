"""What runs the engines the dispatcher talks to: the host contract, the supervisor of
engine processes, the plan, the GPUs."""
