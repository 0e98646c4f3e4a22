# tests/torch_env.sh — source me: makes one venv with tests/requirements-torch.txt
# (torch, torchvision and timm), shared by every build (CI runs the suite four times; about a
# minute and 5.4 GB to make), at $BFS_TORCH_VENV (default /var/tmp/batchfs-torch-venv),
# remade when the requirements change; sets $TORCH_PY to its python. Exits 77 (skip) only
# when not in CI and PyPI is unreachable; in CI (CI=true) a venv that cannot be made is a
# failure. Scripts running at once wait for each other (flock).
_tv=${BFS_TORCH_VENV:-/var/tmp/batchfs-torch-venv}
_tv_want=$(sha256sum <tests/requirements-torch.txt | cut -c1-16)
mkdir -p "$(dirname "$_tv")"
exec 8>"$_tv.lock"
flock 8
if [ ! -x "$_tv/bin/python" ] || [ "$(cat "$_tv/.stamp" 2>/dev/null)" != "$_tv_want" ]; then
    rm -rf "$_tv"
    echo "torch_env: making $_tv (torch, torchvision, timm: about a minute)" >&2
    if ! { python3 -m venv "$_tv" &&
           "$_tv/bin/pip" install -q --no-cache-dir -r tests/requirements-torch.txt &&
           echo "$_tv_want" >"$_tv/.stamp"; } >&2; then
        rm -rf "$_tv"
        flock -u 8
        if [ "${CI:-}" = true ]; then echo "torch_env: cannot make the torch venv" >&2; exit 1; fi
        echo "SKIP: cannot make the torch venv (PyPI unreachable?)" >&2; exit 77
    fi
fi
flock -u 8
exec 8>&-
TORCH_PY=$_tv/bin/python
export TORCH_PY
