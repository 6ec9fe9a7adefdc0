#!/usr/bin/env bash
# budget-check.sh: the GPU bundle's device-memory budget check (run.sh's
# budget part; scripts/gpu-bundle.sh copies this file there).
#
#   ./budget-check.sh RESULTS_DIR [gpu|rehearsal]
#
# Runs a sweep of one trial on GPU 0, so that its worker asks the budget
# broker for its bill (its buffers, streams' scratch and the CUDA context
# and modules it measured when it opened the device, docs/budgets.md), and
# compares that bill with what the driver says the worker's process used:
#
#   - on a GPU, nvidia-smi's used memory of the worker's process
#     (--query-compute-apps), sampled every 0.2 s while the sweep runs, the
#     most seen;
#   - on the emulated driver (a rehearsal), its own record of the process's
#     peak (CUDAEMU_STATE, which a real driver ignores).
#
# Writes RESULTS_DIR/budget.json (the bill by kind, the driver's figure and
# its source, tolaria-worker info's context_bytes, the trial's memory_bill
# event) for the report, and passes when the bill with its 10% headroom
# covers the driver's figure: what the broker promises the other workers on
# the GPU. Exit status: 0 passed, 1 failed (the figures or the reason on the
# last line).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${1:?usage: budget-check.sh RESULTS_DIR [gpu|rehearsal]}
profile=${2:-gpu}
dir=$res/budget
rm -rf "$dir" && mkdir -p "$dir" || exit 1
worker=$here/tolaria-worker

examples=8192 epochs=4
[ "$profile" = rehearsal ] && examples=512 epochs=1
cat >"$dir/sweep.yaml" <<EOF
base:
  data: {dataset: synthetic, synthetic_size: $examples}
  schedule: {batch_size: 64, log_every: 32, epochs: $epochs}
  graphs: {enabled: true}
  model: {hidden: [512, 512]}
trials:
  - {name: billed}
EOF

# The emulated driver keeps every process's peak here; a real one ignores
# the variable.
export CUDAEMU_STATE=$dir/emu-state
info=$("$worker" info) || { echo "budget: tolaria-worker info failed"; exit 1; }
echo "budget: $info"

# A look at the context's measure where the worker runs in a PID namespace
# of its own, as in a container: a driver whose NVML lists the host's pids
# there hides the worker from itself, and it measures its context from the
# driver's used memory instead, saying why (driver 580 on an H100 listed it
# under its own pid, and it measured through NVML). Recorded in budget.json
# (pid_namespace); it fails nothing, since unshare may be refused here.
pidns="not looked at: no unshare"
if command -v unshare >/dev/null 2>&1; then
	if out=$(unshare --pid --fork --mount-proc "$worker" info 2>&1); then
		pidns="tolaria-worker info in a new PID namespace: $(tr '\n' ' ' <<<"$out")"
	else
		pidns="unshare --pid --fork --mount-proc tolaria-worker info failed: $(tr '\n' ' ' <<<"$out")"
	fi
fi
echo "budget: $pidns"

sampler=
if command -v nvidia-smi >/dev/null 2>&1; then
	(while :; do
		nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >>"$dir/nvidia-smi.csv" 2>/dev/null
		sleep 0.2
	done) &
	sampler=$!
fi
"$here/tolaria" sweep "$dir/sweep.yaml" --device cuda --devices 0 --per-device 1 --worker "$worker" \
	--sweep-dir "$dir/sweep" >"$dir/sweep.log" 2>&1
rc=$?
[ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
if [ "$rc" != 0 ]; then
	tail -n 5 "$dir/sweep.log"
	echo "budget: the sweep failed (exit $rc; $dir/sweep.log)"
	exit 1
fi

python3 - "$dir" "$res/budget.json" "$info" "$pidns" <<'PY'
import glob, json, os, re, sys

d, out, info, pidns = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
res = json.load(open(os.path.join(d, "sweep", "results.json")))
trial = res["trials"][0]
run = trial["run_dir"]
if not os.path.isabs(run):
    run = os.path.join(d, "sweep", run)
grant, memory_bill = None, None
for line in open(os.path.join(run, "events.jsonl")):
    e = json.loads(line)
    if e.get("kind") == "budget_grant" and grant is None:
        grant = e["fields"]
    elif e.get("kind") == "memory_bill" and memory_bill is None:
        memory_bill = e["fields"]
m = re.search(r"worker_pid=(\d+)", open(os.path.join(run, "worker.log")).read())
check = {"trial": trial["name"], "device": trial.get("device", ""), "pid_namespace": pidns.strip()}
problems = []
if grant is None or m is None:
    problems.append("the trial's events hold no budget_grant" if grant is None else "its worker log names no worker_pid")
else:
    pid = int(m.group(1))
    bill = grant.get("bill") or {}
    check.update(worker_pid=pid, bill_bytes=int(grant["bytes"]), bill=bill, context_bytes=int(bill.get("context", 0)),
                 headroom_bytes=int(grant["bytes"] * 1.1))
    cm = re.search(r"context_bytes=(\d+)", info)
    if cm:
        check["info_context_bytes"] = int(cm.group(1))
    if memory_bill:
        check["memory_bill"] = memory_bill
    used, source = 0, ""
    smi = os.path.join(d, "nvidia-smi.csv")
    if os.path.exists(smi):
        for row in open(smi):
            parts = [p.strip() for p in row.split(",")]
            if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
                used = max(used, int(parts[1]) << 20)
        source = "nvidia-smi, the worker process's used memory, the most of samples every 0.2 s"
    if used == 0:
        for state in sorted(glob.glob(os.path.join(d, "emu-state", "device-*.state"))):
            for row in open(state):
                f = row.split()
                if len(f) >= 12 and f[0] == "process" and f[1] == str(pid):
                    used = max(used, int(f[11]))
        source = "the emulated driver's record of the worker process's peak (CUDAEMU_STATE)"
    if used == 0:
        problems.append("no driver figure for the worker process %d (no nvidia-smi sample, no emulated driver's record)" % pid)
    else:
        check.update(used_bytes=used, used_source=source, bill_over_used=round(check["bill_bytes"] / used, 3))
        if check["headroom_bytes"] < used:
            problems.append("the driver's %d bytes exceed the bill with headroom (%d)" % (used, check["headroom_bytes"]))
mib = lambda b: "%.1f MiB" % (b / (1 << 20))
if "used_bytes" in check:
    detail = "bill %s (context %s as the worker measured it), with 10%% headroom %s; the driver's figure %s (%s)" % (
        mib(check["bill_bytes"]), mib(check["context_bytes"]), mib(check["headroom_bytes"]), mib(check["used_bytes"]), check["used_source"])
else:
    detail = "no comparison"
check["passed"] = not problems
check["detail"] = detail + ("; " + "; ".join(problems) if problems else "")
tmp = out + ".partial"
with open(tmp, "w") as f:
    json.dump(check, f, indent=1)
os.replace(tmp, out)
print("budget: " + check["detail"])
sys.exit(0 if check["passed"] else 1)
PY
