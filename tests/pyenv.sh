# tests/pyenv.sh — source me: makes $BUILD/venv with tests/requirements.txt (once) and
# puts its python first on PATH as $PY. Exits 77 (skip) only when not in CI and PyPI is
# unreachable; in CI (CI=true) a missing Python environment is a failure.
: "${BUILD:=build}"
_venv=${BFS_VENV:-$BUILD/venv}
if [ ! -x "$_venv/bin/python" ] || [ tests/requirements.txt -nt "$_venv/.stamp" ]; then
    if ! { python3 -m venv "$_venv" && "$_venv/bin/pip" install -q -r tests/requirements.txt &&
           touch "$_venv/.stamp"; } >&2; then
        rm -rf "$_venv"
        if [ "${CI:-}" = true ]; then echo "pyenv: cannot build the Python test venv" >&2; exit 1; fi
        echo "SKIP: cannot build the Python test venv (PyPI unreachable?)" >&2; exit 77
    fi
fi
case $_venv in /*) PY=$_venv/bin/python ;; *) PY=$PWD/$_venv/bin/python ;; esac
export PY
