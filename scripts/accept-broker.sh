#!/usr/bin/env bash
# Reruns the distributed-mode measurements against real processes on
# 127.0.0.1: a redis-server of its own (no persistence), infer worker and
# infer serve --broker processes, load from wrk and vegeta.
#   throughput  2 workers behind 2 frontends at sim 77ms + 1.16ms, batch 64,
#               against the in-process batched endpoint with 2 workers
#   overhead    latency added by the broker: a 1 ms model, no batching wait,
#               one connection, against the in-process endpoint
#   kill9       kill -9 of one worker in the middle of an open-loop load
#   restart     redis-server killed and restarted in the middle of the load
#   mismatch    a frontend whose only worker serves another model: how soon
#               it answers 503 no_workers; then the last worker of its model
#               killed (kill -9) or stopped under a waiting request
#   redis-down  how soon the frontend's /readyz follows Redis going and coming
# Needs redis-server and wrk (apt-get install redis-server wrk); vegeta runs
# from the Go module cache. Every load is bounded in time. Ports from
# INFER_ACCEPT_PORT_BASE (default 27000): Redis +379, frontends +81…, workers
# +101….
# Usage: scripts/accept-broker.sh [section...] (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(throughput overhead kill9 restart mismatch redis-down); fi
make -s build
BIN=bin/infer
TMP=$(mktemp -d -t infer-broker.XXXXXX)
TOOLS=(redis-server redis-cli curl)
if section throughput || section overhead; then TOOLS+=(wrk); fi
for tool in "${TOOLS[@]}"; do
	command -v $tool >/dev/null || { echo "$tool missing: apt-get install -y redis-server wrk curl"; exit 1; }
done
if section kill9 || section restart; then vegeta_install; fi

BASE=${INFER_ACCEPT_PORT_BASE:-27000} # ports: Redis BASE+379, frontends BASE+81.., workers BASE+101..
REDIS_PORT=$((BASE + 379))
BROKER=redis://127.0.0.1:$REDIS_PORT/0
SIM=(--model sim --sim-fixed 77ms --sim-per-item 1.16ms)
BATCH=(--batch 64 --max-latency 100ms)
PIDS=()
REDIS=

redis_start() {
	redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >>"$TMP/redis.log" 2>&1 &
	REDIS=$!
	for _ in $(seq 1 100); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && return 0; sleep 0.05; done
	echo "redis-server did not start"; cat "$TMP/redis.log"; exit 1
}
redis_kill() { kill -9 "$REDIS" 2>/dev/null || true; wait "$REDIS" 2>/dev/null || true; REDIS=; }
wait_ready() { # URL [PID]: wait up to 15 s for URL/readyz, or fail
	await_ready "$1" "${2:-}" 15 || { echo "$1 did not become ready"; tail -20 "$TMP"/*.log; exit 1; }
}
# spawn URL LOG COMMAND...: start COMMAND, its output in $TMP/LOG, once
# nothing answers on URL, and wait until URL/readyz answers; its pid in
# SPAWNED and PIDS.
spawn() {
	local url=$1 log=$2
	shift 2
	port_free "$url"
	"$@" >"$TMP/$log" 2>&1 &
	SPAWNED=$!
	PIDS+=("$SPAWNED")
	wait_ready "$url" "$SPAWNED"
}
worker() { # N EXTRA...: start worker N with its metrics on 127.0.0.1:2710N
	local n=$1; shift
	spawn "http://127.0.0.1:$((BASE + 100 + n))" "worker$n.log" \
		"$BIN" worker --broker "$BROKER" "${SIM[@]}" "${BATCH[@]}" --metrics-addr "127.0.0.1:$((BASE + 100 + n))" --log-level warn "$@"
	eval "WORKER$n=$SPAWNED"
}
frontend() { # N EXTRA...: start frontend N on 127.0.0.1:2708N
	local n=$1; shift
	spawn "http://127.0.0.1:$((BASE + 80 + n))" "frontend$n.log" \
		"$BIN" serve --addr "127.0.0.1:$((BASE + 80 + n))" --broker "$BROKER" "${SIM[@]}" --log-level warn "$@"
}
stop_all() {
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
	redis_kill
}
trap 'stop_all; rm -rf "$TMP"' EXIT

cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body   = '{"inputs":["Paris is the [MASK] of France."]}'
wrk.headers["Content-Type"] = "application/json"
LUA
echo -n '{"inputs":["Paris is the [MASK] of France."]}' >"$TMP/body.json"
printf 'POST http://127.0.0.1:%s/batched\nContent-Type: application/json\n@%s\n\nPOST http://127.0.0.1:%s/batched\nContent-Type: application/json\n@%s\n\n' \
	$((BASE + 81)) "$TMP/body.json" $((BASE + 82)) "$TMP/body.json" >"$TMP/targets"

# wrk_line FILE: "N req/s, p50 X, p99 Y" from wrk --latency output.
wrk_line() { awk '/Requests\/sec/ {r=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2} /Non-2xx/ {bad=$NF} END {printf "%s req/s, p50 %s, p99 %s, non-2xx %d", r, p50, p99, bad}' "$1"; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.0f ms", (b - a) * 1000}'; }
# post URL TIMEOUT: one /batched request; prints "status code seconds".
post() {
	local out
	out=$(curl -s -o "$TMP/resp" -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' \
		-H "X-Request-Timeout: $2" --data-binary @"$TMP/body.json" "$1/batched")
	local code
	code=$(grep -o '"code":"[^"]*"' "$TMP/resp" | cut -d'"' -f4 || true)
	echo "${out% *} ${code:--} ${out#* }"
}
# wait_readyz URL CODE [STATUS [SINCE]]: poll /readyz every 10 ms, for up to
# 15 s, until it answers CODE (with STATUS), and print how long after SINCE
# (default: now) that was.
wait_readyz() {
	local t0=${4:-$(now)} got
	for _ in $(seq 1 1500); do
		got=$(curl -s -w ' %{http_code}' "$1/readyz" || true)
		if [[ "$got" == *" $2" && ( -z "${3:-}" || "$got" == *"\"$3\""* ) ]]; then ms_since "$t0"; return 0; fi
		sleep 0.01
	done
	echo "$1/readyz never answered $2 ${3:-} (last: $got)"; tail -20 "$TMP"/*.log; exit 1
}

if section throughput; then
	echo "== throughput: sim 77ms + 1.16ms, batch 64, max-latency 100ms (ceiling 423/s per worker; target 0.9 x 2 x 423 = 761)"
	redis_start
	worker 1; worker 2
	frontend 1 --queue-cap 4096; frontend 2 --queue-cap 4096
	wrk -t1 -c256 -d15s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk1.out" &
	W1=$!
	wrk -t1 -c256 -d15s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 82))/batched >"$TMP/wrk2.out"
	wait $W1
	echo "broker, 2 workers, 2 frontends x 256 connections:"
	echo "  frontend 1: $(wrk_line "$TMP/wrk1.out")"
	echo "  frontend 2: $(wrk_line "$TMP/wrk2.out")"
	total=$(cat "$TMP/wrk1.out" "$TMP/wrk2.out" | awk '/Requests\/sec/ {s += $2} END {printf "%.0f", s}')
	for n in 1 2; do
		sum=$(metric infer_batch_size_sum http://127.0.0.1:$((BASE + 100 + n))); cnt=$(metric infer_batch_size_count http://127.0.0.1:$((BASE + 100 + n)))
		echo "  worker $n: mean batch $(awk -v s="$sum" -v c="$cnt" 'BEGIN{printf "%.1f", s/c}')"
	done
	echo "  total $total req/s = $(awk -v t="$total" 'BEGIN{printf "%.3f", t/846}') x 2 x 423"
	sleep 1 # let the entries of the closed connections drain
	wrk -t1 -c4 -d8s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk.light"
	echo "  light load, 4 connections: $(wrk_line "$TMP/wrk.light")"
	stop_all

	spawn http://127.0.0.1:$((BASE + 81)) inproc.log "$BIN" serve --addr 127.0.0.1:$((BASE + 81)) "${SIM[@]}" "${BATCH[@]}" --workers 2 --log-level warn
	wrk -t2 -c512 -d15s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk.inproc"
	echo "in-process, 2 workers, 512 connections: $(wrk_line "$TMP/wrk.inproc")"
	sleep 1 # let the entries of the closed connections drain
	wrk -t1 -c4 -d8s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk.light"
	echo "  light load, 4 connections: $(wrk_line "$TMP/wrk.light")"
	stop_all
fi

if section overhead; then
	echo "== added latency: sim 1ms per batch, no batching wait (--policy immediate), one connection, 8s each"
	FAST=(--model sim --sim-fixed 1ms --sim-per-item 0s --policy immediate)
	redis_start
	spawn http://127.0.0.1:$((BASE + 101)) worker1.log "$BIN" worker --broker "$BROKER" "${FAST[@]}" --metrics-addr 127.0.0.1:$((BASE + 101)) --log-level warn
	spawn http://127.0.0.1:$((BASE + 81)) frontend1.log "$BIN" serve --addr 127.0.0.1:$((BASE + 81)) --broker "$BROKER" "${FAST[@]}" --log-level warn
	wrk -t1 -c1 -d8s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk.broker"
	echo "broker:     $(wrk_line "$TMP/wrk.broker")"
	stop_all
	spawn http://127.0.0.1:$((BASE + 81)) inproc.log "$BIN" serve --addr 127.0.0.1:$((BASE + 81)) "${FAST[@]}" --log-level warn
	wrk -t1 -c1 -d8s --latency -s "$TMP/post.lua" http://127.0.0.1:$((BASE + 81))/batched >"$TMP/wrk.inproc"
	echo "in-process: $(wrk_line "$TMP/wrk.inproc")"
	stop_all
fi

if section kill9; then
	echo "== kill -9 of one worker at 4s into 12s of 300 req/s (visibility timeout 3s, request timeout 30s)"
	redis_start
	worker 1 --visibility-timeout 3s; worker 2 --visibility-timeout 3s
	frontend 1; frontend 2
	"$VEGETA" attack -targets "$TMP/targets" -rate 300/s -duration 12s -timeout 40s >"$TMP/kill.bin" &
	ATTACK=$!
	sleep 4
	kill -9 "$WORKER1"
	held=$(redis-cli -p $REDIS_PORT --raw xpending infer:sim:classify:requests workers | awk -v pid="-$WORKER1-" 'found {print; exit} index($0, pid) {found=1}')
	echo "killed worker 1 (pid $WORKER1) holding ${held:-0} unacknowledged entries"
	wait $ATTACK
	statuses "$TMP/kill.bin"
	echo "  worker 2 claimed $(metric infer_broker_claims_total http://127.0.0.1:$((BASE + 102))) entries; backlog now $(redis-cli -p $REDIS_PORT xlen infer:sim:classify:requests)"
	stop_all
fi

if section restart; then
	echo "== redis-server killed at 3s, restarted at 5s, into 10s of 300 req/s (request timeout 5s)"
	redis_start
	worker 1; worker 2
	frontend 1; frontend 2
	"$VEGETA" attack -targets "$TMP/targets" -rate 300/s -duration 10s -timeout 10s -header 'X-Request-Timeout: 5s' >"$TMP/restart.bin" &
	ATTACK=$!
	sleep 3
	t0=$(date +%s.%N); redis_kill
	sleep 2
	redis_start; t1=$(date +%s.%N)
	wait $ATTACK
	statuses "$TMP/restart.bin"
	"$VEGETA" encode --to csv <"$TMP/restart.bin" | python3 -c '
import csv, sys
down, up = float(sys.argv[1]), float(sys.argv[2])
rows = [(int(r[0]) / 1e9, r[1]) for r in csv.reader(sys.stdin)]
start = min(t for t, _ in rows)
fails = [t for t, c in rows if c != "200"]
after = [c for t, c in rows if t > up + 1]
print(f"  Redis down {down - start:.2f}s..{up - start:.2f}s after the start; non-200 sent from {min(fails) - start:.2f}s to {max(fails) - start:.2f}s" if fails else "  no failures")
ok = after.count("200")
print(f"  sent from 1s after Redis was back: {len(after)} requests, {ok} answered 200")
' "$t0" "$t1"
	stop_all
fi

if section mismatch; then
	echo "== mismatch: frontend --model sim, its only worker --model bert-mini (request timeout 30s)"
	redis_start
	F=http://127.0.0.1:$((BASE + 81))
	spawn "http://127.0.0.1:$((BASE + 101))" worker1.log "$BIN" worker --broker "$BROKER" --model bert-mini --metrics-addr "127.0.0.1:$((BASE + 101))"
	port_free "$F"
	"$BIN" serve --addr "${F#http://}" --broker "$BROKER" "${SIM[@]}" >"$TMP/frontend1.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 1 1500); do
		r=$(curl -s "$F/readyz" || true)
		[[ "$r" == *status* && "$r" != *loading* ]] && break
		sleep 0.01
	done
	echo "  first request, as soon as the frontend has loaded: $(post "$F" 30s) (status code seconds; it waits up to an expiry, 1 s, for a worker to show up)"
	echo "  /readyz: $(curl -s -w '%{http_code} ' "$F/readyz" -o "$TMP/readyz")$(cat "$TMP/readyz")"
	for i in $(seq 1 20); do post "$F" 30s; sleep 0.05; done | awk '{n[$1 " " $2]++; if ($3 > max) max = $3} END {for (k in n) printf "  20 requests after it: %d x %s, slowest %.3f s\n", n[k], k, max}'
	echo "  frontend log: $(grep -m1 'no live worker' "$TMP/frontend1.log" | cut -c1-320)"
	echo "  worker log:   $(grep -m1 'no live frontend' "$TMP/worker1.log" | cut -c1-320)"

	echo "== the last worker of the frontend's model killed with kill -9 while a request waits for it (sim 3 s per batch)"
	spawn "http://127.0.0.1:$((BASE + 102))" worker2.log \
		"$BIN" worker --broker "$BROKER" --model sim --sim-fixed 3s --sim-per-item 0s --batch 1 --metrics-addr "127.0.0.1:$((BASE + 102))" --log-level warn
	VICTIM=$SPAWNED
	echo "  frontend ready $(wait_readyz "$F" 200) after the worker"
	post "$F" 30s >"$TMP/waiting" &
	WAITING=$!
	sleep 0.5
	t0=$(now)
	{ kill -9 $VICTIM; wait $VICTIM; } 2>/dev/null || true
	wait $WAITING || true
	echo "  the waiting request: $(cat "$TMP/waiting") (status code seconds), answered $(ms_since "$t0") after the kill"
	echo "  /readyz 503 no_workers $(wait_readyz "$F" 503 no_workers "$t0") after the kill; a new request: $(post "$F" 30s)"

	echo "== the last worker of the frontend's model stopped (SIGINT)"
	spawn "http://127.0.0.1:$((BASE + 103))" worker3.log \
		"$BIN" worker --broker "$BROKER" --model sim --sim-fixed 1ms --metrics-addr "127.0.0.1:$((BASE + 103))" --log-level warn
	STOPPED=$SPAWNED
	wait_readyz "$F" 200 >/dev/null
	t0=$(now)
	kill -INT $STOPPED
	wait $STOPPED || true
	echo "  worker exited $(ms_since "$t0") after SIGINT; frontend /readyz 503 no_workers $(wait_readyz "$F" 503 no_workers "$t0") after SIGINT"
	stop_all
fi

if section redis-down; then
	echo "== redis-server killed and restarted: how soon /readyz follows"
	redis_start
	worker 1
	frontend 1
	F=http://127.0.0.1:$((BASE + 81))
	t0=$(now)
	redis_kill
	echo "  Redis killed: frontend /readyz 503 $(wait_readyz "$F" 503 unavailable "$t0"), worker /readyz 503 $(wait_readyz "http://127.0.0.1:$((BASE + 101))" 503 "" "$t0") after the kill"
	echo "  a request meanwhile: $(post "$F" 30s) (status code seconds)"
	sleep 1
	redis_start
	t0=$(now)
	echo "  Redis back: frontend /readyz 200 $(wait_readyz "$F" 200 "" "$t0") after it answered PING; a request: $(post "$F" 30s)"
	stop_all
fi
