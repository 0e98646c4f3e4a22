# tests/servers_env.sh — source me: makes one venv of test servers with
# tests/requirements-servers.txt (moto's S3 server), shared by every build (CI runs the
# suite four times: plain and three sanitizers; ~30 s to make), at $BFS_SERVERS_VENV
# (default /var/tmp/batchfs-servers-venv), remade when the requirements change; sets
# $MOTO_SERVER. Exits 77 (skip) only when not in CI and PyPI is unreachable; in CI
# (CI=true) a venv that cannot be made is a failure. Scripts running at once wait for each
# other (flock).
_sv=${BFS_SERVERS_VENV:-/var/tmp/batchfs-servers-venv}
_sv_want=$(sha256sum <tests/requirements-servers.txt | cut -c1-16)
mkdir -p "$(dirname "$_sv")"
exec 9>"$_sv.lock"
flock 9
if [ ! -x "$_sv/bin/moto_server" ] || [ "$(cat "$_sv/.stamp" 2>/dev/null)" != "$_sv_want" ]; then
    rm -rf "$_sv"
    if ! { python3 -m venv "$_sv" && "$_sv/bin/pip" install -q -r tests/requirements-servers.txt &&
           echo "$_sv_want" >"$_sv/.stamp"; } >&2; then
        rm -rf "$_sv"
        flock -u 9
        if [ "${CI:-}" = true ]; then echo "servers_env: cannot make the test servers' venv" >&2; exit 1; fi
        echo "SKIP: cannot make the test servers' venv (PyPI unreachable?)" >&2; exit 77
    fi
fi
flock -u 9
exec 9>&-
MOTO_SERVER=$_sv/bin/moto_server
export MOTO_SERVER
