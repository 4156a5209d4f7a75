"""SQL store: the source of truth for jobs, rounds, steps, rewards and checkpoints."""
