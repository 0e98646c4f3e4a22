# tests/servers_env.sh — source me: makes one venv of test servers with
# tests/requirements-servers.txt (moto's S3 server), shared by every build (CI runs the
# suite four times; ~30 s to make), at $BFS_SERVERS_VENV (default
# /var/tmp/batchfs-servers-venv), remade when the requirements change (tests/shared_venv.sh:
# exits 77 only when not in CI and PyPI is unreachable); sets $MOTO_SERVER.
. tests/shared_venv.sh
shared_venv "${BFS_SERVERS_VENV:-/var/tmp/batchfs-servers-venv}" tests/requirements-servers.txt \
    bin/moto_server servers_env
MOTO_SERVER=${BFS_SERVERS_VENV:-/var/tmp/batchfs-servers-venv}/bin/moto_server
export MOTO_SERVER
