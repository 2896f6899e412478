#!/usr/bin/env bash
# Reruns the ONNX Runtime measurements quoted in docs/measured.md against real
# processes on 127.0.0.1: the offline ceiling of bert-mini (the model alone,
# per batch size), the served /batched and /naive throughput under closed-loop
# wrk load with the built-in corpus (realistic sentence lengths), and the
# resident memory of bert-base with 1 and 2 workers. Needs wrk
# (apt-get install -y wrk). Every load is bounded in time.
# Usage: scripts/accept-onnx.sh [section...]; sections: ceiling served memory
# (default: all). MODEL (default bert-mini), BATCH (64), DURATION (6s, per
# load), ROUNDS (5) and PORT (18081) override the settings; SERVE_ARGS (default
# "--buckets none", so that served batches pad like the offline bench's)
# adds flags to the served model.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
make -s setup build
BIN=bin/infer
MODEL=${MODEL:-bert-mini}
BATCH=${BATCH:-64}
DURATION=${DURATION:-6s}
ROUNDS=${ROUNDS:-5}
SERVE_ARGS=${SERVE_ARGS---buckets none}
URL=http://127.0.0.1:${PORT:-18081}
TMP=$(mktemp -d -t infer-onnx.XXXXXX)
trap 'stop_server; rm -rf "$TMP"' EXIT
CORPUS=loadgen/corpus/masked.txt
command -v wrk >/dev/null || { echo "wrk missing: apt-get install -y wrk"; exit 1; }

# Each request is one corpus sentence, in turn, as a text/plain body.
cat >"$TMP/corpus.lua" <<'LUA'
local lines, i = {}, 0
function init(args)
	for l in io.lines(args[1]) do lines[#lines + 1] = l end
	i = math.random(#lines)
end
function request()
	i = i % #lines + 1
	return wrk.format("POST", nil, { ["Content-Type"] = "text/plain" }, lines[i])
end
LUA

load() { # load ENDPOINT CONNECTIONS: requests/s of a closed-loop wrk run
	wrk -t1 -c"$2" -d"$DURATION" --timeout 30s --latency -s "$TMP/corpus.lua" "$URL$1" -- "$PWD/$CORPUS" >"$TMP/wrk.out"
	if grep -q 'Non-2xx' "$TMP/wrk.out"; then grep 'Non-2xx' "$TMP/wrk.out" >&2; fi
	awk '/Requests\/sec/ {print $2}' "$TMP/wrk.out"
}
ceiling() { # ceiling BATCHES: the offline items/s of the last batch size
	"$BIN" models bench "$MODEL" --batch "$1" --duration "${DURATION%s}s" --corpus "$CORPUS" --json >"$TMP/ceiling.json"
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["points"][-1]["items_per_sec"])' "$TMP/ceiling.json"
}

SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(ceiling served memory); fi

if section ceiling; then
	echo "== offline ceiling of $MODEL (the model alone, corpus sentences)"
	"$BIN" models bench "$MODEL" --batch 1,8,32,64 --duration "${DURATION%s}s" --corpus "$CORPUS"
fi

if section served; then
	echo "== served $MODEL, batch $BATCH, max-latency 100ms, $((2 * BATCH)) connections, vs the offline ceiling at batch $BATCH"
	# Short rounds alternate the two, and the median round counts, so that
	# other work on the machine in bursts hits both sides or only one round.
	# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
	serve --model "$MODEL" --batch "$BATCH" --max-latency 100ms $SERVE_ARGS
	echo "(serve flags: ${SERVE_ARGS:-none added})"
	ratios=()
	for r in $(seq 1 "$ROUNDS"); do
		o=$(ceiling "$BATCH")
		b=$(load /batched $((2 * BATCH)))
		p99=$(awk '$1 == "99%" {print $2}' "$TMP/wrk.out")
		ratio=$(awk -v b="$b" -v o="$o" 'BEGIN {printf "%.3f", b / o}')
		ratios+=("$ratio")
		printf "round %d: offline %.1f items/s, /batched %.1f items/s (p99 %s): %s x\n" "$r" "$o" "$b" "$p99" "$ratio"
	done
	sum=$(metric 'infer_batch_size_sum{endpoint="batched"}'); cnt=$(metric 'infer_batch_size_count{endpoint="batched"}')
	naive=$(load /naive 8)
	stop_server
	median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
	echo "/batched over the offline ceiling: median $median of $ROUNDS rounds (mean batch $(awk -v s="$sum" -v c="$cnt" 'BEGIN {printf "%.1f", s / c}'))"
	awk -v n="$naive" -v b="$b" 'BEGIN {printf "/naive (8 connections): %.1f items/s; last /batched round over /naive: %.2f\n", n, b / n}'
fi

if section memory; then
	echo "== resident memory of serve --model bert-base (after warm-up and a few requests)"
	for w in 1 2; do
		serve --model bert-base --workers "$w" --batch 32
		for _ in 1 2 3; do
			curl -fsS -d 'Paris is the [MASK] of France.' "$URL/batched" >/dev/null
			curl -fsS -d 'Paris is the [MASK] of France.' "$URL/naive" >/dev/null
		done
		echo "--workers $w: RSS $(($(rss_kib VmRSS) / 1024)) MiB (peak $(($(rss_kib VmHWM) / 1024)) MiB)"
		stop_server
	done
fi
