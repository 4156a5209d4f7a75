"""Pure domain: workflows, plans, prompts, problems, states, effects and the error tree (no I/O frameworks)."""
