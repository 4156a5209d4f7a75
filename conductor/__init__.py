"""conductor: a job-queue system that runs an RL-trained Conductor LLM over a pool of worker LLMs."""

import os

# litellm fetches its model cost map from the internet at import time unless told not to;
# every entry point imports this package first, so setting it here covers them all.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
