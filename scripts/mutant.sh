#!/usr/bin/env bash
# Runs one package's tests against one mutant, without touching the source
# tree: the mutated file goes to a temporary directory and `go test -overlay`
# builds with it. Use it to check that a new test kills the mutant it was
# written for, or to try a mutant by hand that gremlins reports NOT COVERED
# (see docs/testing.md).
#
#   scripts/mutant.sh FILE:LINE:COL OLD NEW [go test flags]
#   scripts/mutant.sh data/dataset.go:109:6 '+=' '-=' -run TestNormalize
#
# FILE is relative to the repository root (gremlins prints it relative to the
# package: prefix the package directory); COL counts bytes from 1, a tab as
# one, as gremlins does. Exit status: 0 the tests failed (KILLED), 1 they
# passed (LIVED), 2 the change does not build, bad usage, or OLD is not at
# that position.
set -uo pipefail

usage() {
	echo "usage: scripts/mutant.sh FILE:LINE:COL OLD NEW [go test flags]   e.g. data/dataset.go:109:6 '+=' '-='" >&2
	exit 2
}
[ $# -ge 3 ] || usage
pos=$1 old=$2 new=$3
shift 3
IFS=: read -r file line col <<<"$pos"
root=$(cd "$(dirname "$0")/.." && pwd)
[[ "$line" =~ ^[0-9]+$ && "$col" =~ ^[0-9]+$ ]] || { echo "mutant: $pos: want FILE:LINE:COL" >&2; usage; }
abs=$root/$file
[ -f "$abs" ] || { echo "mutant: $file: no such file under $root" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# awk in the C locale counts bytes, as gremlins' columns do.
if ! LC_ALL=C awk -v L="$line" -v C="$col" -v O="$old" -v N="$new" '
	NR == L {
		if (substr($0, C, length(O)) != O) {
			printf "mutant: %s:%d:%d holds %s, not %s\n", FILENAME, L, C, substr($0, C, length(O)), O > "/dev/stderr"
			exit 3
		}
		$0 = substr($0, 1, C - 1) N substr($0, C + length(O))
	}
	{ print }' "$abs" >"$tmp/$(basename "$file")"; then
	exit 2
fi
printf '{"Replace":{"%s":"%s"}}\n' "$abs" "$tmp/$(basename "$file")" >"$tmp/overlay.json"

echo "mutant: $file:$line:$col $old -> $new: go test -count=1 $* ./$(dirname "$file")/"
cd "$root" || exit 2
go test -count=1 -overlay "$tmp/overlay.json" "$@" "./$(dirname "$file")/" 2>&1 | tee "$tmp/out"
rc=${PIPESTATUS[0]}
# go test exits 1 for a build failure as for a failing test; its output
# tells them apart.
if [ "$rc" -ne 0 ] && grep -qE '\[(build|setup) failed\]' "$tmp/out"; then
	echo "mutant: NOT VIABLE (the package does not build with the change)"
	exit 2
elif [ "$rc" -ne 0 ]; then
	echo "mutant: KILLED (the tests failed with the change)"
	exit 0
fi
echo "mutant: LIVED (the tests passed with the change)"
exit 1
