#!/usr/bin/env bash
# Create .venv-phoenix: a separate virtualenv holding Arize Phoenix, the real OTLP receiver the
# trace test (tests/integration/test_phoenix_trace.py) sends a job's spans to. Kept apart from
# the main .venv because Phoenix pins its own stack (SQLAlchemy, pydantic, grpcio, pandas,
# OpenTelemetry...) and would fight the main project's pins; the test only runs `phoenix serve`
# from it and reads the spans back over HTTP.
#
# Idempotent: a marker file inside the venv records the installed version; when it matches,
# the script exits at once.
#
# Usage: scripts/setup_phoenix_venv.sh [VENV_DIR]   (default: <repo>/.venv-phoenix)
# Env:   PHOENIX_VERSION (default 20.26.1), PYTHON (default python3.11)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/side_venv.sh
. "$repo_root/scripts/lib/side_venv.sh"
venv="${1:-$repo_root/.venv-phoenix}"
want="arize-phoenix==${PHOENIX_VERSION:-20.26.1}"
marker="$venv/.conductor-phoenix-version"

side_venv_open phoenix "$venv" "$want" "$marker"
"$venv/bin/python" -m pip install --quiet "$want"

# Smoke check: the server's entry point runs (fail here rather than at server start).
"$venv/bin/phoenix" --help >/dev/null
"$venv/bin/python" -c 'import phoenix; print("phoenix", phoenix.__version__, "imports fine")'

side_venv_close phoenix "$venv" "$want" "$marker"
