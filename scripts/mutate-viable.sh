#!/usr/bin/env bash
# Lists the KILLED mutants of a gremlins log that do not compile.
#
#   scripts/mutate-viable.sh PKGDIR LOG      e.g. device/cpu .mutate/device_cpu.log
#
# gremlins v0.6.0 counts a mutant as KILLED when `go test` exits 1, and go test
# exits 1 for a build failure too, so a mutant that does not compile (`+`
# between strings made `-`, `break` in a switch made `continue`) is counted
# as killed. This builds each candidate (the mutant kinds that can break the
# build: ARITHMETIC_BASE, INVERT_ASSIGNMENTS, INVERT_LOOPCTRL) with
# `go build -overlay` and prints those that fail to build; scripts/mutate.sh
# runs it after each package and reports the count.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/mutate-viable.sh PKGDIR LOG" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${1#./}
pkg=${pkg%/}
log=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# No candidate at all is not an error (grep exits 1 then).
{ grep -E '^[[:space:]]*KILLED (ARITHMETIC_BASE|INVERT_ASSIGNMENTS|INVERT_LOOPCTRL) at ' "$log" || true; } |
	sed -E 's/^[[:space:]]*KILLED ([A-Z_]+) at (.*):([0-9]+):([0-9]+)$/\1 \2 \3 \4/' |
	while read -r kind file line col; do
		src=$root/$pkg/$file
		[ -f "$src" ] || continue
		# The token at the position, and what gremlins turns it into.
		tok=$(LC_ALL=C awk -v L="$line" -v C="$col" 'NR == L { print substr($0, C, 8); exit }' "$src")
		case "$kind:$tok" in
		ARITHMETIC_BASE:+*) old=+ new=- ;;
		ARITHMETIC_BASE:-*) old=- new=+ ;;
		ARITHMETIC_BASE:\**) old='*' new=/ ;;
		ARITHMETIC_BASE:/*) old=/ new='*' ;;
		ARITHMETIC_BASE:%*) old=% new='*' ;;
		INVERT_ASSIGNMENTS:+=*) old=+= new=-= ;;
		INVERT_ASSIGNMENTS:-=*) old=-= new=+= ;;
		INVERT_ASSIGNMENTS:\*=*) old='*=' new=/= ;;
		INVERT_ASSIGNMENTS:/=*) old=/= new='*=' ;;
		INVERT_LOOPCTRL:break*) old=break new=continue ;;
		INVERT_LOOPCTRL:continue*) old=continue new=break ;;
		*) continue ;;
		esac
		LC_ALL=C awk -v L="$line" -v C="$col" -v O="$old" -v N="$new" \
			'NR == L { $0 = substr($0, 1, C - 1) N substr($0, C + length(O)) } { print }' "$src" >"$tmp/mutant.go"
		printf '{"Replace":{"%s":"%s"}}\n' "$src" "$tmp/mutant.go" >"$tmp/overlay.json"
		if ! (cd "$root" && go build -overlay "$tmp/overlay.json" -o /dev/null "./$pkg/") >/dev/null 2>&1; then
			echo "NOT VIABLE $kind at $file:$line:$col ($old -> $new does not compile)"
		fi
	done
