"""A real headless Chromium (Debian's `chromium`) driven by Playwright for Python. Playwright's own
browser download is never used: it is pointed at the system executable."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = os.environ.get("CONDUCTOR_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in containers, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_or_skip() -> str:
    """The Chromium executable; skips (saying why) where it is missing and cannot be installed."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") is None:
        pytest.skip(f"no Chromium at {CHROMIUM} and no apt-get to install it (scripts/ensure_services.sh does)")
    pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/ensure_services.sh (apt-get install -y chromium)")


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched browser; each test opens its own context (cookies are per context)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def log_in(context: Any, ui_url: str, key: str) -> Any:
    """A page logged in through the explorer's form (as a person would)."""
    page = context.new_page()
    page.goto(f"{ui_url}/login")
    page.fill("input[name=key]", key)
    page.click("button[type=submit]")
    page.wait_for_url(f"{ui_url}/jobs")
    return page
