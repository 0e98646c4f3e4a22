# tests/shared_venv.sh — source me: shared_venv VENV REQUIREMENTS EXE WHAT makes VENV from
# REQUIREMENTS (pip, no cache) unless VENV/EXE exists and VENV/.stamp holds the
# requirements' hash; one venv for every build (CI runs the suite four times), remade
# when the requirements change; scripts running at once wait for each other (flock on
# VENV.lock, descriptor 8). Exits 77 (skip) only when not in CI and the venv cannot be
# made (PyPI unreachable?); in CI (CI=true) that is a failure, exit 1. WHAT names the
# caller in its messages. Used by tests/servers_env.sh and tests/torch_env.sh.
shared_venv() {
    local venv=$1 req=$2 exe=$3 what=$4 want
    want=$(sha256sum <"$req" | cut -c1-16)
    mkdir -p "$(dirname "$venv")"
    exec 8>"$venv.lock"
    flock 8
    if [ ! -x "$venv/$exe" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
        rm -rf "$venv"
        echo "$what: making $venv from $req" >&2
        if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --no-cache-dir -r "$req" &&
               echo "$want" >"$venv/.stamp"; } >&2; then
            rm -rf "$venv"
            flock -u 8
            if [ "${CI:-}" = true ]; then echo "$what: cannot make $venv" >&2; exit 1; fi
            echo "SKIP: $what: cannot make $venv (PyPI unreachable?)" >&2; exit 77
        fi
    fi
    flock -u 8
    exec 8>&-
}
