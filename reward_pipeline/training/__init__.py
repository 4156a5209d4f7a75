"""Retraining the Conductor from its own traces: dataset, format warm-up, offline/online GRPO,
checkpoints, the evaluation gate and promotion."""
