#!/usr/bin/env bash
# check-infra.sh: validate the committed Prometheus files with promtool.
#
#   promtool check rules   infra/prometheus/alert_rules.yml
#   promtool test rules    infra/prometheus/alert_rules_test.yml
#   promtool check config  infra/prometheus/prometheus.yml
#
# Installs the Debian package `prometheus` (which provides promtool) when
# promtool is missing. Exits non-zero if any check fails. `make test` runs it.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prom="$root/infra/prometheus"

if ! command -v promtool >/dev/null 2>&1; then
	echo "check-infra: promtool not found; installing the Debian package 'prometheus' with apt-get" >&2
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		sudo="sudo"
	fi
	if ! $sudo apt-get update -qq ||
		! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus; then
		echo "check-infra: could not install prometheus; install promtool and run again" >&2
		exit 1
	fi
fi

echo "check-infra: $(promtool --version 2>&1 | head -n 1)"
cd "$prom" || exit 1
failed=()
check() {
	echo "check-infra: promtool $*"
	if ! promtool "$@"; then
		failed+=("promtool $*")
	fi
}
check check rules alert_rules.yml
check test rules alert_rules_test.yml
check check config prometheus.yml

if [ "${#failed[@]}" -gt 0 ]; then
	printf 'check-infra: FAILED: %s\n' "${failed[@]}" >&2
	echo "check-infra: if the generated files are stale, run \`make generate\` first" >&2
	exit 1
fi
echo "check-infra: ok"
