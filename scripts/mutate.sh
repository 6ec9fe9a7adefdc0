#!/usr/bin/env bash
# Mutation testing of tolaria's packages with gremlins, one package at a time.
#
#   scripts/mutate.sh [-diff REF] PKG...      e.g. scripts/mutate.sh ./trainer
#
# For each package, gremlins runs the package's tests once with coverage, then
# changes one operator at a time in its non-test Go files (`<` to `<=`, `+` to
# `-`, `&&` to `||`, ...; .gremlins.yaml lists which) and runs the package's
# tests again: a mutant the tests notice is KILLED, one they do not is LIVED.
# It works on copies under $TMPDIR; the source tree is never edited.
# Results: .mutate/<pkg>.json (gremlins' machine-readable report),
# .mutate/<pkg>.log (every mutant and its status) and .mutate/<pkg>.notviable
# (the KILLED mutants that in fact do not compile; see mutate-viable.sh);
# docs/testing.md says how to read them and records the survivors.
#
# With -diff REF only the lines changed since the merge base with REF (the
# working tree included, as `git diff --merge-base REF`) are mutated, and
# packages with no changed Go file are skipped.
#
# It installs gremlins at a pinned version into $(go env GOPATH)/bin if it is
# missing. It is slow on purpose: one mutant costs one `go test` of its
# package, one after another (docs/testing.md records the times).
set -euo pipefail

GREMLINS_VERSION=v0.6.0 # github.com/go-gremlins/gremlins; `gremlins --version` prints "dev", so the module version is read with `go version -m`
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.mutate"

usage() {
	echo "usage: scripts/mutate.sh [-diff REF] PKG...   (PKG like ./trainer; REF a branch or commit)" >&2
	exit 2
}

diff=
while [ $# -gt 0 ]; do
	case "$1" in
	-diff | --diff)
		[ $# -ge 2 ] && [ -n "$2" ] || { echo "mutate: -diff needs a branch or commit, e.g. -diff main" >&2; usage; }
		diff=$2
		shift 2
		;;
	-h | --help) usage ;;
	-*) echo "mutate: unknown option $1" >&2; usage ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "mutate: no packages given" >&2; usage; }

if ! command -v go >/dev/null 2>&1; then
	echo "mutate: Go is not installed; install Go 1.26 or newer and re-run" >&2
	exit 1
fi
gremlins="$(go env GOPATH)/bin/gremlins"
if ! { [ -x "$gremlins" ] && go version -m "$gremlins" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+github.com/go-gremlins/gremlins[[:space:]]+${GREMLINS_VERSION}[[:space:]]"; }; then
	echo "mutate: installing gremlins $GREMLINS_VERSION into $(dirname "$gremlins")"
	go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
fi

cd "$root"
if [ -n "$diff" ] && ! git rev-parse --verify --quiet "$diff^{commit}" >/dev/null; then
	echo "mutate: -diff $diff is not a branch or commit of this repository" >&2
	exit 2
fi

# Check every package before spending minutes on the first one.
dirs=()
for p in "$@"; do
	d=${p#./}
	d=${d%/}
	case "$d" in
	*...*) echo "mutate: $p: give package directories one by one (./trainer ./graphs), not patterns" >&2; exit 2 ;;
	esac
	if ! ls "$d"/*.go >/dev/null 2>&1 || [ -z "$(find "$d" -maxdepth 1 -name '*.go' ! -name '*_test.go' -print -quit)" ]; then
		echo "mutate: $p is not a Go package directory of this module (looked in $root/$d)" >&2
		exit 2
	fi
	dirs+=("$d")
done

mkdir -p "$out"
echo "mutate: gremlins $GREMLINS_VERSION over ${dirs[*]}${diff:+ (lines changed since the merge base with $diff)}"
echo "mutate: at commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ', with uncommitted changes')"
echo "mutate: one \`go test\` per mutant, one at a time; a whole package takes minutes (docs/testing.md lists the last times)"
status=0
for d in "${dirs[@]}"; do
	name=${d//\//_}
	if [ -n "$diff" ] && git diff --quiet --merge-base "$diff" -- "$d/*.go" ":(exclude)$d/*_test.go"; then
		# gremlins would mutate the whole package when a diff is empty.
		echo "mutate: $d: no Go file changed since the merge base with $diff; skipped"
		continue
	fi
	echo "mutate: $d: started $(date -u +%FT%TZ); log in .mutate/$name.log"
	start=$(date +%s)
	# Run from the package directory with no path argument: gremlins then
	# mutates this package (and those below it) only. Paths in its report and
	# in `git diff` must agree, so git is told to print paths relative to the
	# package (diff.relative); gremlins compares them to its own.
	# GOFLAGS=-count=1: a cached coverage run would take milliseconds, and
	# gremlins derives every mutant's timeout from that run's duration.
	if ! (cd "$d" && GOFLAGS=-count=1 \
		GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
		"$gremlins" unleash --config "$root/.gremlins.yaml" --output "$out/$name.json" \
		${diff:+--diff "$diff"}) >"$out/$name.log" 2>&1; then
		echo "mutate: $d: gremlins failed; the end of .mutate/$name.log:" >&2
		tail -n 20 "$out/$name.log" >&2
		status=1
		continue
	fi
	secs=$(($(date +%s) - start))
	echo "mutate: $d: done in ${secs}s"
	grep -E '^[[:space:]]*(LIVED|TIMED OUT)' "$out/$name.log" | sed "s|^|    $d: |" || true
	grep -E '^(Killed|Timed out|Mutator coverage|Test efficacy)' "$out/$name.log" | sed "s|^|    |" || true
	# gremlins counts a mutant that does not compile as KILLED.
	if "$root/scripts/mutate-viable.sh" "$d" "$out/$name.log" >"$out/$name.notviable"; then
		echo "    of the KILLED, $(grep -c . "$out/$name.notviable" || true) do not compile (listed in .mutate/$name.notviable)"
	else
		echo "mutate: $d: checking which KILLED mutants compile failed; the KILLED count includes any that do not" >&2
		status=1
	fi
done
exit $status
