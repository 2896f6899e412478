#!/usr/bin/env bash
# Reruns the figures of the Llama decoders from llama2.c checkpoints (issue
# 21), on stories260k:
#   exact    the exactness tests of models/llama: ONNX Runtime against the Go
#            reference at every position (incremental and recomputed), greedy
#            text alone = in a batch of 16 joining and leaving sequences
#            (continuous and static), and through the OpenAI API = the
#            reference, with their measured logit differences
#   offline  offline decode tokens/s at batch 1/8/32 (context CONTEXT) and
#            prefill tokens/s: infer models bench stories260k
#   streams  served tokens/s at 1, 8 and 32 closed-loop streams (a 16-token
#            prompt, 128 tokens out, ignore_eos) on /v1 with --max-seqs 32,
#            and the server process's CPU time per generated token
#   static   continuous (/v1) against static (/static/v1) on mixed lengths:
#            32 closed-loop streams, 32 slots, prompts of 10 to 80 tokens
#            (as the bench counts them, with GPT-2's tokenizer: up to about
#            260 of stories260k's), max_tokens lognormal (median 50, sigma
#            0.8, at most 200: within the context of 512) with ignore_eos;
#            ROUNDS runs
# Usage: scripts/accept-llama.sh [section...] (default: all). BIN (the
# infer binary; default bin/infer, built first), MODEL (stories260k; a .bin
# path serves any llama2.c checkpoint), CONTEXT (80), ROUNDS (3), WINDOW
# (20s, a served run's measured window) and PORT (28200) override the
# settings. The bench runs are kept in results/accept-llama-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
BIN=${BIN:-bin/infer}
if [[ $BIN == bin/infer ]]; then make -s setup build; fi
MODEL=${MODEL:-stories260k}
CONTEXT=${CONTEXT:-80}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-20s}
PORT=${PORT:-28200}
URL=http://127.0.0.1:$PORT
SECTIONS=${*:-exact offline streams static}
TMP=$(mktemp -d -t infer-llama.XXXXXX)
RESULTS=results/accept-llama-$(date -u +%Y%m%dT%H%M%S)
trap 'stop_server; rm -rf "$TMP"' EXIT

# scenario NAME CONCURRENCY PROMPT OUTPUT ENDPOINTS: a closed-loop LLM
# scenario against the server on $URL, written to $TMP/NAME.yaml.
scenario() {
	cat >"$TMP/$1.yaml" <<EOF
name: $1
description: $MODEL, $2 closed-loop streams
target:
  urls: [$URL]
payload:
  api: completions
  prompt_tokens: $3
  output_tokens: $4
  ignore_eos: true
load:
  concurrency: $2
  warmup: 3s
  duration: $WINDOW
  drain: 2m
sweep:
  endpoints: [$5]
EOF
}

# run NAME [FLAGS...]: infer bench of $TMP/NAME.yaml into $RESULTS/NAME;
# prints the run directory.
run() {
	local out=$RESULTS/$1
	shift
	mkdir -p "$RESULTS"
	bench "$BIN" "$TMP/$(basename "$out").yaml" "$out" "$@" >&2 || exit 1
	echo "$out"
}

for section in $SECTIONS; do
	case $section in
	exact)
		echo "== exactness (go test ./models/llama)"
		INFER_REQUIRE_ORT=1 go test -count=1 -v ./models/llama \
			-run 'TestORTReference|TestStories260kTellsAStory|TestGreedyInABatchOf16|TestServedGreedyTextIsTheReference' |
			grep -E '^(---|ok|FAIL|\s+llama_test.go:.*within)' | cut -c1-200
		;;
	offline)
		echo "== offline decode and prefill, $MODEL, context $CONTEXT"
		"$BIN" models bench "$MODEL" --batch 1,8,32 --context "$CONTEXT" --prompts 16,128
		;;
	streams)
		echo "== served, $MODEL on /v1, --max-seqs 32: 16 tokens in, 128 out, closed loop"
		serve --model "$MODEL" --max-seqs 32
		tck=$(getconf CLK_TCK)
		for c in 1 8 32; do
			scenario "streams-$c" "$c" 16 128 continuous
			ticks0=$(cpu_ticks) toks0=$(metric 'infer_gen_generation_tokens_total{endpoint="v1"}')
			out=$(run "streams-$c")
			ticks1=$(cpu_ticks) toks1=$(metric 'infer_gen_generation_tokens_total{endpoint="v1"}')
			read -r rate tpot failed < <(jq -r '.llm | "\(.output_tokens_per_s) \(.tpot_ms.p50) \(.failed)"' "$out/results.jsonl")
			LC_ALL=C printf '  %2d streams: %6.0f tokens/s, TPOT p50 %.2f ms, server CPU %.0f µs a generated token (%d tokens), failed %s\n' \
				"$c" "$rate" "$tpot" "$(awk -v t=$((ticks1 - ticks0)) -v k="$tck" -v n=$((${toks1%.*} - ${toks0%.*})) 'BEGIN {print t / k * 1e6 / n}')" \
				$((${toks1%.*} - ${toks0%.*})) "$failed"
		done
		stop_server
		;;
	static)
		echo "== continuous vs static, $MODEL, 32 streams, mixed lengths: $ROUNDS runs"
		serve --model "$MODEL" --max-seqs 32
		scenario mixed 32 '{dist: uniform, min: 10, max: 80}' '{dist: lognormal, median: 50, sigma: 0.8, max: 200}' 'continuous, static'
		pairs=()
		for r in $(seq "$ROUNDS"); do
			cp "$TMP/mixed.yaml" "$TMP/mixed-$r.yaml"
			out=$(run "mixed-$r")
			read -r cont cont_ttft cont_failed stat stat_ttft stat_failed < <(jq -rs 'INDEX(.point.endpoint) | [.continuous, .static] | map("\(.llm.output_tokens_per_s) \(.llm.ttft_ms.p50) \(.llm.failed)") | join(" ")' "$out/results.jsonl")
			LC_ALL=C printf '  round %d: continuous %.0f tokens/s (TTFT p50 %.0f ms, %d failed), static %.0f tokens/s (TTFT p50 %.0f ms, %d failed)\n' \
				"$r" "$cont" "$cont_ttft" "$cont_failed" "$stat" "$stat_ttft" "$stat_failed"
			pairs+=("$cont" "$stat")
		done
		stop_server
		python3 - "${pairs[@]}" <<'PY'
import statistics, sys
v = list(map(float, sys.argv[1:]))
r = [a / b for a, b in zip(v[0::2], v[1::2])]
print("  continuous / static: " + " ".join(f"{x:.2f}" for x in r) + f"  (median {statistics.median(r):.2f})")
PY
		;;
	*)
		echo "unknown section $section (want exact, offline, streams, static)" >&2
		exit 2
		;;
	esac
done
if [[ -d $RESULTS ]]; then echo "bench runs in $RESULTS"; fi
