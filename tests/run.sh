#!/usr/bin/env bash
# tests/run.sh — run every test of batchfs and print one closing line "N passed, N failed,
# N skipped" (and "(N of them in part ...)" when some). Called by `make test` (BUILD= the
# build directory).
#
# A test is: a libcheck suite ($BUILD/tests/check_*), a script tests/cli/*.sh or
# tests/mount/*.sh (exit 0 pass, 77 skip, anything else fail), or a fuzz smoke run of each
# $BUILD/fuzz/fuzz_* for FUZZ_SECONDS (skipped with a loud message when clang's libFuzzer
# is unavailable, which `make deps` installs). Logs go to $BUILD/test-logs/.
#
# Skipped in part: a test that exits 0 but printed a line "SKIP: ..." (libcheck suites
# through tu_skip, tests/testutil.h: a case that cannot run here, e.g. not root) left
# something untested; it counts as skipped, not passed, and its line says which.
#
# A ThreadSanitizer build (make SANITIZER=thread test) reads TSAN_OPTIONS, set below: its
# reports go to files, and any report of a race (or other "WARNING: ThreadSanitizer") by
# any process of a test fails that test, whatever the process's exit status and wherever
# its stderr went (a daemon's log, /dev/null); the reports are appended to the test's log.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD BFS_BUILD=$PWD/$BUILD
logs=$BUILD/test-logs
rm -rf "$logs" && mkdir -p "$logs"
pass=0 fail=0 skip=0 part=0 failed=()

# ThreadSanitizer: stop a process at its first report (halt_on_error, exit status 66) and
# write every report to $tsan_dir/report.PID, which run_one reads. tests/tsan.supp names
# the races of third-party libraries that are suppressed, each with its reason. What the
# caller exported in TSAN_OPTIONS comes last and wins.
tsan_dir=$(cd "$logs" && pwd)/tsan
mkdir -p "$tsan_dir"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions='$PWD/tests/tsan.supp' log_path='$tsan_dir/report' ${TSAN_OPTIONS:-}"

# The ThreadSanitizer output of the test that just ran, appended to its log (LOG). Prints
# how many of those reports are warnings (races and the like); a deadly signal a test
# raised on purpose (kill -SEGV) is output too, but no warning.
tsan_reports() { # LOG
    local r n=0
    for r in "$tsan_dir"/report.*; do
        [ -e "$r" ] || continue
        grep -q "WARNING: ThreadSanitizer" "$r" && n=$((n + 1))
        { echo "--- ThreadSanitizer, pid ${r##*.}:"; cat "$r"; } >>"$1"
        rm -f "$r"
    done
    echo "$n"
}

run_one() { # name, command...
    local name=$1; shift
    local log=$logs/$(echo "$name" | tr '/' '_').log
    local t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local dt=$((SECONDS - t0))
    local races
    races=$(tsan_reports "$log")
    if [ "$races" -gt 0 ]; then
        fail=$((fail + 1)); failed+=("$name")
        printf 'FAIL  %-40s rc=%d, %d ThreadSanitizer report(s), log: %s\n' "$name" "$rc" \
            "$races" "$log"
        grep -m1 -A40 "WARNING: ThreadSanitizer" "$log" | sed 's/^/      | /'
    elif [ $rc -eq 0 ] && grep -Eq '^(## )?SKIP: ' "$log"; then
        skip=$((skip + 1)); part=$((part + 1))
        printf 'SKIP  %-40s in part, %d thing(s) untested (%s)\n' "$name" \
            "$(grep -Ec '^(## )?SKIP: ' "$log")" "$(grep -Em1 '^(## )?SKIP: ' "$log")"
    elif [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-40s %3ds\n' "$name" "$dt"
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %-40s (%s)\n' "$name" "$(grep -m1 -i 'skip' "$log" || true)"
    else
        fail=$((fail + 1)); failed+=("$name")
        printf 'FAIL  %-40s rc=%d, log: %s\n' "$name" "$rc" "$log"
        tail -n 25 "$log" | sed 's/^/      | /'
    fi
}

for t in "$BUILD"/tests/check_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/cli/*.sh tests/mount/*.sh; do
    [ -f "$s" ] || continue
    run_one "${s#tests/}" bash "$s"
done
if [ "${FUZZ_SECONDS:-5}" != 0 ]; then
    if make --no-print-directory -s BUILD="$BUILD" fuzz-build >"$logs/fuzz-build.log" 2>&1; then
        for f in "$BUILD"/fuzz/fuzz_*; do
            [ -x "$f" ] || continue
            run_one "fuzz/$(basename "$f")" bash tests/fuzz/run.sh "$f"
        done
    else
        echo "FAIL  fuzz build (clang/libFuzzer): see $logs/fuzz-build.log"
        tail -n 15 "$logs/fuzz-build.log" | sed 's/^/      | /'
        fail=$((fail + 1)); failed+=("fuzz-build")
    fi
fi

echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
if [ $part -gt 0 ]; then
    echo "$pass passed, $fail failed, $skip skipped ($part of them in part: see SKIP above)"
else
    echo "$pass passed, $fail failed, $skip skipped"
fi
[ $fail -eq 0 ]
