#!/usr/bin/env bash
# Per-side account of warren's echo over the socket and over the rings:
# system calls, context switches and CPU time per call of the client and
# of the server process (perf stat), sequential 128 B and 16 callers of
# 1 KiB. Run from bench/: bash cmd/ringprobe/perf.sh
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/ringprobe" ./cmd/ringprobe
ev=raw_syscalls:sys_enter,context-switches,task-clock
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for cfg in "20000 1 128" "32000 16 1024"; do
  for mode in socket ring; do
    i=$((${i:-0} + 1))
    sock="$dir/rp$i.sock"
    perf stat -x, -e "$ev" -o "$dir/srv" "$dir/ringprobe" server "unix://$sock" "$mode" >"$dir/srv$i.out" 2>/dev/null &
    srv=$!
    while ! grep -q ready "$dir/srv$i.out" 2>/dev/null; do sleep 0.05; done
    line=$(perf stat -x, -e "$ev" -o "$dir/cli" "$dir/ringprobe" client "unix://$sock" "$mode" $cfg)
    pkill -INT -P "$srv" ringprobe || true
    wait "$srv" || true
    calls=${cfg%% *}
    per() { awk -F, -v n="$calls" '/^[0-9]/ { if ($3 == "task-clock") printf "%.1f us CPU", $1 * 1000 / n; else printf "%.2f %s, ", $1 / n, $3 }' "$1"; }
    echo "$line"
    echo "  per call, client: $(per "$dir/cli")"
    echo "  per call, server: $(per "$dir/srv")"
  done
done
