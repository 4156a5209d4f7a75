"""Screenshot one job's trace in a local Arize Phoenix (docs/telemetry/README.md has the whole recipe).

Usage: python docs/telemetry/phoenix_screenshot.py TRACE_ID OUT.png [--phoenix http://127.0.0.1:6006]
Needs Playwright for Python and a Chromium (Debian's `chromium`; Playwright's own download is not used)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.request

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def project_of(phoenix: str, trace_id: str) -> str:
    """The Phoenix project (its GraphQL id) holding the trace."""
    with urllib.request.urlopen(f"{phoenix}/v1/projects") as r:
        projects = json.load(r)["data"]
    for project in projects:
        with urllib.request.urlopen(f"{phoenix}/v1/projects/{project['name']}/spans?limit=1000") as r:
            if any(s["context"]["trace_id"] == trace_id for s in json.load(r)["data"]):
                return project["id"]
    raise SystemExit(f"no project in {phoenix} holds trace {trace_id}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace_id")
    ap.add_argument("out")
    ap.add_argument("--phoenix", default="http://127.0.0.1:6006")
    args = ap.parse_args()
    url = f"{args.phoenix}/projects/{project_of(args.phoenix, args.trace_id)}/traces/{args.trace_id}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(url)
        page.wait_for_selector("text=conductor.job", timeout=60_000)
        page.wait_for_timeout(1500)  # the span tree and the detail pane settle
        page.screenshot(path=args.out)
        browser.close()
    print(url)


if __name__ == "__main__":
    main()
