#!/bin/bash
# waits for a quiet machine, then measures the split decision before and after
B=/tmp/budgetwt.Bsop.bench
cd /work/main/device/cpu
end=$(( $(date +%s) + 3000 ))
while :; do
  l=$(cut -d' ' -f1 /proc/loadavg)
  if awk "BEGIN{exit !($l < 0.8)}"; then break; fi
  if [ $(date +%s) -gt $end ]; then echo "no quiet window (load $l)"; exit 1; fi
  sleep 20
done
echo "# start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
SH='BenchmarkGemmSplit/(64x128x10|128x64x10_tA|64x10x128_tB|128x128x10|128x128x10_tA|128x10x128_tB|256x128x10|128x256x10_tA|256x10x128_tB|32x64x64|64x64x64)'
for r in 1 2 3 4 5; do
  for v in 0 1; do for th in 1 2; do
    echo "# round $r build=$v threads=$th load $(cut -d' ' -f1 /proc/loadavg)"
    $B/cpu_split$v.test -test.run '^$' -test.bench "$SH/threads=$th\$" -test.benchtime 100ms 2>&1 | grep Benchmark | sed "s#^BenchmarkGemmSplit/\([^/]*\)/#BenchmarkGemmSplit/\1/build$v/#"
  done; done
done
for r in 1 2 3 4 5 6; do for v in 0 1; do
  echo "# step round $r build=$v load $(cut -d' ' -f1 /proc/loadavg)"
  $B/cpu_split$v.test -test.run '^$' -test.bench 'BenchmarkReplayedStep$' -test.benchtime 500ms 2>&1 | grep Benchmark
done; done
echo "# end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
