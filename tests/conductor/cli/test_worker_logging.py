"""A worker prints each litellm log event once: litellm's own stream handler is dropped once
Celery has set up logging (before, every event came out twice: litellm's handler plus root's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = """
import sys
from celery import Celery
from litellm._logging import verbose_logger
if sys.argv[1] == "fixed":
    from conductor.cli.main import _log_litellm_once
    _log_litellm_once()
app = Celery(set_as_current=False)
app.conf.worker_hijack_root_logger = False
app.log.setup(loglevel="INFO")  # what a worker does at start
verbose_logger.setLevel("INFO")
verbose_logger.info("LITELLM-EVENT")
"""


@pytest.mark.parametrize(("mode", "times"), [("as-litellm-ships", 2), ("fixed", 1)])
def test_each_litellm_event_is_logged_once_by_a_worker(mode, times):
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], check=False, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": ""})  # fmt: skip
    assert (out.stdout + out.stderr).count("LITELLM-EVENT") == times, out.stderr[-2000:]
