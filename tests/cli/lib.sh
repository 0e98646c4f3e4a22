# tests/cli/lib.sh — what the command-line tests share; sourced with the test's name:
#   . "$(dirname "$0")/lib.sh" NAME
# Executed directly (as tests/run.sh does with every tests/cli/*.sh), it tests itself.
# Gives BUILD (absolute), MK (mkbatchfs), GEN (the ImageFolder generator), T (a temporary
# directory removed on exit, after the test's own cli_cleanup_hook if it defines one),
# fail/ok, and run CMD... (stdout and stderr captured in $T/stdout, $T/stderr, the exit
# status in $rc) with expect_rc WANT WHAT and expect_err TEXT WHAT to check them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
MK=$BUILD/mkbatchfs
GEN=$BUILD/tests/gen_imagefolder

T=$(mktemp -d "${TMPDIR:-/tmp}/cli-${1:-lib}.XXXXXX")
cli_cleanup() {
    if declare -F cli_cleanup_hook >/dev/null; then cli_cleanup_hook || true; fi
    rm -rf "$T"
}
trap cli_cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in stdout stderr; do
        if [ -s "$T/$f" ]; then echo "--- $f of the last command:" >&2; head -n 30 "$T/$f" >&2; fi
    done
    exit 1
}
ok() { echo "ok - $*"; }

rc=0
run() {
    set +e
    "$@" >"$T/stdout" 2>"$T/stderr"
    rc=$?
    set -e
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "$2: exit status $rc, expected $1"; }
expect_err() { grep -qF -- "$1" "$T/stderr" || fail "$2: stderr does not mention '$1'"; }

if [ "${BASH_SOURCE[0]}" = "$0" ]; then # executed, not sourced: the helpers themselves
    run sh -c 'echo out; echo err >&2; exit 3'
    expect_rc 3 "run's exit status"
    expect_err err "run's stderr"
    grep -qx out "$T/stdout" || fail "run's stdout"
    if (fail "on purpose" 2>/dev/null); then fail "fail returned"; fi
    if (expect_rc 0 "on purpose" 2>/dev/null); then fail "expect_rc passed a wrong status"; fi
    if (expect_err nothing-like-it "on purpose" 2>/dev/null); then fail "expect_err passed"; fi
    ok "cli/lib.sh: run, expect_rc, expect_err and fail"
fi
