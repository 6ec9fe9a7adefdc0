#!/bin/sh
# fake_peer.sh stands in for bench/peer/torch_mlp.py in tests: it takes the
# same flags and prints the same JSON object without training anything.
# Step i takes FAKE_PEER_STEP_MS milliseconds (default 200), and every
# fourth step five times that, so that the median of windows of four steps
# (2x) differs from the median of single steps (1x). With --epoch it
# reports an epoch of FAKE_PEER_EPOCH_SECONDS (default 8) over 60000
# samples. FAKE_PEER_THREADS and FAKE_PEER_HIDDEN override the thread count
# and hidden widths it reports;
# With --omp-wait-policy unset it reports no policy, and
# FAKE_PEER_UNSET_STEP_MS and FAKE_PEER_UNSET_EPOCH_SECONDS, when set,
# replace the step and epoch times; with another policy it reports that
# policy in capitals (PASSIVE without the flag).
# FAKE_PEER_LOG, when set, gets one line "peer" per run ("peer:POLICY"
# with --omp-wait-policy); FAKE_PEER_FAIL
# makes it fail with a message on stderr.
set -eu
steps=0 threads=0 batch=0 hidden= epoch=false policy=
while [ $# -gt 0 ]; do
	case $1 in
	--steps) steps=$2; shift ;;
	--threads) threads=$2; shift ;;
	--batch-size) batch=$2; shift ;;
	--hidden) hidden=$2; shift ;;
	--epoch) epoch=true ;;
	--omp-wait-policy) policy=$2; shift ;;
	esac
	shift
done
if [ -n "${FAKE_PEER_FAIL:-}" ]; then
	echo "fake_peer: $FAKE_PEER_FAIL" >&2
	exit 1
fi
[ -n "${FAKE_PEER_LOG:-}" ] && echo "peer${policy:+:$policy}" >>"$FAKE_PEER_LOG"
ms=${FAKE_PEER_STEP_MS:-200} es=${FAKE_PEER_EPOCH_SECONDS:-8} reported=PASSIVE
case $policy in
unset) ms=${FAKE_PEER_UNSET_STEP_MS:-$ms} es=${FAKE_PEER_UNSET_EPOCH_SECONDS:-$es} reported= ;;
?*) reported=$(echo "$policy" | tr a-z A-Z) ;;
esac
awk -v n="$steps" -v ms="$ms" -v threads="${FAKE_PEER_THREADS:-$threads}" -v policy="$reported" \
	-v batch="$batch" -v hidden="${FAKE_PEER_HIDDEN:-$hidden}" -v epoch="$epoch" -v es="$es" 'BEGIN {
	printf "{\"peer\":\"fake\",\"version\":\"0\",\"omp_wait_policy\":\"%s\",", policy
	printf "\"threads\":%d,\"batch_size\":%d,\"hidden\":[%s],\"step_seconds\":[", threads, batch, hidden
	for (i = 0; i < n; i++) printf "%s%g", (i ? "," : ""), (i % 4 == 3 ? 5 : 1) * ms / 1000
	printf "]"
	if (epoch == "true") printf ",\"epoch\":{\"seconds\":%g,\"steps\":938,\"samples\":60000,\"test_accuracy\":0.5}", es
	printf "}\n"
}'
