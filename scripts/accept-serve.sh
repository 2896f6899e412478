#!/usr/bin/env bash
# Reruns the serving-core measurements quoted in docs/measured.md against real
# processes on 127.0.0.1: closed-loop throughput with wrk, server CPU per
# request, overload, SIGTERM under load, and bad input during load.
# Needs wrk (apt-get install wrk); vegeta runs from the Go module cache.
# Every load is bounded in time. Usage: scripts/accept-serve.sh [section...]
# Sections: throughput cpu overload sigterm badinput (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
make -s build
BIN=bin/infer
URL=http://127.0.0.1:18080
TMP=$(mktemp -d -t infer-accept.XXXXXX)
trap 'stop_server; rm -rf "$TMP"' EXIT
vegeta_install
command -v wrk >/dev/null || { echo "wrk missing: apt-get install -y wrk"; exit 1; }

cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body   = '{"inputs":["Paris is the [MASK] of France."]}'
wrk.headers["Content-Type"] = "application/json"
LUA

wrk_rps() { wrk "$@" -s "$TMP/post.lua" | tee "$TMP/wrk.out" | awk '/Requests\/sec/ {print $2}'; }

SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(throughput cpu overload sigterm badinput); fi

if section throughput; then
	echo "== throughput: sim 77ms + 1.16ms, batch 64, max-latency 100ms (ceiling 423/s per worker)"
	serve --model sim --sim-fixed 77ms --sim-per-item 1.16ms --batch 64 --max-latency 100ms
	rps=$(wrk_rps -t2 -c128 -d15s "$URL/batched")
	sum=$(metric 'infer_batch_size_sum{endpoint="batched"}'); cnt=$(metric 'infer_batch_size_count{endpoint="batched"}')
	echo "1 worker, 128 connections, /batched: $rps req/s, mean batch $(awk -v s="$sum" -v c="$cnt" 'BEGIN{printf "%.1f", s/c}')"
	rps=$(wrk_rps -t1 -c128 -d10s "$URL/naive")
	echo "1 worker, 128 connections, /naive:   $rps req/s (ceiling 12.8)"
	stop_server
	serve --model sim --sim-fixed 77ms --sim-per-item 1.16ms --batch 64 --max-latency 100ms --workers 4
	rps=$(wrk_rps -t2 -c512 -d15s "$URL/batched")
	echo "4 workers, 512 connections, /batched: $rps req/s (ceiling 1693)"
	stop_server
fi

if section cpu; then
	echo "== fast accelerator: sim 4ms + 0.1ms, batch 64, max-latency 10ms (ceiling 6154/s)"
	serve --model sim --sim-fixed 4ms --sim-per-item 0.1ms --batch 64 --max-latency 10ms
	t0=$(cpu_ticks "$SERVER"); r0=$(metric 'infer_items_total{endpoint="batched"}')
	rps=$(wrk_rps -t2 -c512 -d15s "$URL/batched")
	t1=$(cpu_ticks "$SERVER"); r1=$(metric 'infer_items_total{endpoint="batched"}')
	hz=$(getconf CLK_TCK)
	echo "1 worker, 512 connections: $rps req/s; server CPU $(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$(awk -v a="$r0" -v b="$r1" 'BEGIN{print b-a}')" 'BEGIN{printf "%.3f ms per request (%d requests, %.2f s CPU)", t/hz*1000/n, n, t/hz}')"
	stop_server
fi

if section overload; then
	echo "== overload: queue-cap 256, 3x capacity (1270 req/s offered, open loop) for 20s"
	serve --model sim --sim-fixed 77ms --sim-per-item 1.16ms --batch 64 --max-latency 100ms --queue-cap 256

	echo -n 'Paris is the [MASK] of France.' >"$TMP/body"
	printf 'POST %s\nContent-Type: text/plain\n@%s\n' "$URL/batched" "$TMP/body" >"$TMP/targets"
	( while kill -0 "$SERVER" 2>/dev/null; do rss_kib VmRSS; sleep 1; done ) >"$TMP/rss" 2>/dev/null &
	RSSMON=$!
	$VEGETA attack -targets "$TMP/targets" -rate 1270/s -duration 20s -timeout 30s -max-workers 4000 >"$TMP/overload.bin"
	# After the overload: how long until a lone request is served normally again?
	t_end=$(date +%s.%N)
	for i in $(seq 1 40); do
		lat=$(curl -s -o /dev/null -w '%{time_total}' -d 'probe' "$URL/batched")
		now=$(date +%s.%N)
		if awk -v l="$lat" 'BEGIN{exit !(l < 0.300)}'; then
			echo "after overload: a lone request took ${lat}s, $(awk -v a="$t_end" -v b="$now" 'BEGIN{printf "%.2f", b-a}')s after the load stopped"
			break
		fi
		sleep 0.05
	done
	kill "$RSSMON" 2>/dev/null || true
	echo "server RSS during overload: max $(sort -n "$TMP/rss" | tail -1) KiB, first $(head -1 "$TMP/rss") KiB"
	statuses "$TMP/overload.bin"
	stop_server
fi

if section sigterm; then
	echo "== SIGTERM in the middle of a load (drain-timeout 10s)"
	serve --model sim --sim-fixed 77ms --sim-per-item 1.16ms --batch 64 --max-latency 100ms --drain-timeout 10s
	printf 'POST %s\nContent-Type: text/plain\n@%s\n' "$URL/batched" "$TMP/body" >"$TMP/targets"
	echo -n 'Paris is the [MASK] of France.' >"$TMP/body"
	$VEGETA attack -targets "$TMP/targets" -rate 300/s -duration 6s -timeout 20s >"$TMP/term.bin" &
	ATTACK=$!
	sleep 3
	drain_server
	wait "$ATTACK"
	echo "server exit code $DRAIN_EXIT, ${DRAIN_SECONDS}s after SIGTERM"
	$VEGETA encode --to csv <"$TMP/term.bin" | python3 -c '
import csv, sys, collections
n = collections.Counter()
for row in csv.reader(sys.stdin):
    code, err = row[1], row[5]
    kind = "refused (not admitted)" if "connection refused" in err else (err[:60] or "")
    n[(code, kind)] += 1
for (code, kind), c in sorted(n.items()):
    print(f"  status {code} {kind}: {c}")
'
fi

if section badinput; then
	echo "== bad input while a valid load runs"
	serve --model sim --sim-fixed 4ms --sim-per-item 0.1ms --batch 64 --max-latency 10ms --max-body 64KiB --max-items 8
	wrk -t1 -c64 -d8s -s "$TMP/post.lua" "$URL/batched" >"$TMP/wrk.out" &
	WRK=$!
	sleep 1
	head -c 100000 /dev/zero | tr '\0' x >"$TMP/big"
	declare -A want=(
		["malformed JSON"]="400|application/json|{\"inputs\": ["
		["non-string item"]="422|application/json|{\"inputs\": [1]}"
		["no inputs"]="422|application/json|{\"inputs\": []}"
		["too many items"]="422|application/json|{\"inputs\": [\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]}"
		["unsupported type"]="415|application/xml|<a/>"
		["invalid utf-8"]="400|text/plain|$(printf '\xff\xfe')"
	)
	bad=0
	for round in 1 2 3 4 5; do
		for name in "${!want[@]}"; do
			IFS='|' read -r code ctype body <<<"${want[$name]}"
			got=$(curl -s -o "$TMP/err.json" -w '%{http_code}' -H "Content-Type: $ctype" --data-binary "$body" "$URL/batched")
			if [[ $got != "$code" ]] || ! grep -q '"error":{"code"' "$TMP/err.json"; then echo "  $name: got $got $(cat "$TMP/err.json")"; bad=$((bad + 1)); fi
		done
		got=$(curl -s -o "$TMP/err.json" -w '%{http_code}' -H 'Content-Type: text/plain' --data-binary @"$TMP/big" "$URL/batched")
		[[ $got == 413 ]] || { echo "  body too large: got $got"; bad=$((bad + 1)); }
	done
	wait "$WRK"
	echo "bad requests answered other than documented: $bad of 35"
	grep -E "requests in|Non-2xx|Socket errors" "$TMP/wrk.out" | sed 's/^/  valid load: /'
	grep -q "Non-2xx" "$TMP/wrk.out" && echo "  VALID LOAD SAW ERRORS" || echo "  valid load saw no errors"
	stop_server
fi
