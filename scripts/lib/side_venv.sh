# Sourced by setup_vllm_venv.sh and setup_phoenix_venv.sh: a virtualenv of its own for a tool that pins
# its own stack, with a marker file recording the requirement it holds, so a second run returns at once.

# side_venv_open LABEL VENV WANT MARKER: exit 0 when VENV already holds WANT; else make VENV (with $PYTHON,
# default python3.11), drop the marker (a half-finished earlier run must not leave a stale one) and
# bring pip up to date.
side_venv_open() {
    local label=$1 venv=$2 want=$3 marker=$4 python_bin="${PYTHON:-python3.11}"
    if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
        echo "$label venv ready: $venv ($want)"
        exit 0
    fi
    if [[ ! -x "$venv/bin/python" ]]; then
        echo "creating $venv with $python_bin"
        "$python_bin" -m venv "$venv"
    fi
    rm -f "$marker"
    "$venv/bin/python" -m pip install --quiet --upgrade pip wheel
}

# side_venv_close LABEL VENV WANT MARKER: record WANT once the install and its smoke check passed.
side_venv_close() {
    echo "$3" >"$4"
    echo "$1 venv ready: $2 ($3)"
}
