"""The `conductor` command line: the only part of conductor/ that may import tasks, schedulers or reward_pipeline."""
