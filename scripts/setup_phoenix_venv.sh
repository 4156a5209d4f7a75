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
venv="${1:-$repo_root/.venv-phoenix}"
version="${PHOENIX_VERSION:-20.26.1}"
python_bin="${PYTHON:-python3.11}"
marker="$venv/.conductor-phoenix-version"
want="arize-phoenix==$version"

if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/phoenix" ]]; then
    echo "phoenix venv ready: $venv ($want)"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating $venv with $python_bin"
    "$python_bin" -m venv "$venv"
fi
# A half-finished earlier run must not leave a stale marker behind.
rm -f "$marker"

"$venv/bin/python" -m pip install --quiet --upgrade pip wheel
"$venv/bin/python" -m pip install --quiet "$want"

# Smoke check: the server's entry point runs (fail here rather than at server start).
"$venv/bin/phoenix" --help >/dev/null
"$venv/bin/python" -c 'import phoenix; print("phoenix", phoenix.__version__, "imports fine")'

echo "$want" >"$marker"
echo "phoenix venv ready: $venv ($want)"
