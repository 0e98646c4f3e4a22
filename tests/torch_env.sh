# tests/torch_env.sh — source me: makes one venv with tests/requirements-torch.txt
# (torch, torchvision and timm), shared by every build (CI runs the suite four times; about
# a minute and a half and 5.4 GB to make), at $BFS_TORCH_VENV (default
# /var/tmp/batchfs-torch-venv), remade when the requirements change (tests/shared_venv.sh:
# exits 77 only when not in CI and PyPI is unreachable); sets $TORCH_PY to its python.
. tests/shared_venv.sh
shared_venv "${BFS_TORCH_VENV:-/var/tmp/batchfs-torch-venv}" tests/requirements-torch.txt \
    bin/python torch_env
TORCH_PY=${BFS_TORCH_VENV:-/var/tmp/batchfs-torch-venv}/bin/python
export TORCH_PY
