#!/usr/bin/env bash
# Reruns the figures of the ONNX Runtime decoder (issue 11, offline parts):
#   exact    incremental decoding = full recompute, alone = in company of 15
#            joining and leaving sequences, sampling per seed (the tests, with
#            their measured logit differences)
#   ceiling  offline decode tokens/s at batch 1/8/32 and prefill tokens/s,
#            gpt2-tiny and gpt2-mini (MODELS), at CONTEXT tokens
#   layout   the KV-layout measurement behind the design: shared buffer vs a
#            per-sequence cache gathered every step, and a mixed step as one
#            padded run vs split runs (Go benchmarks)
#   memory   gpt2-small resident memory with 16 sequences filling the KV
#            bound, for each --kv-tokens of KV_TOKENS
#   calibrate the sim-lm flags fitted to gpt2-tiny
# and, through `infer serve` and a real streaming client (loadgen/llm, driven
# by server/openai's TestLoad), the served figures:
#   serve-exact    the served tests: greedy and seeded text alone = in company
#                  of 15 streams on /v1, /static/v1, /naive/v1; under KV
#                  pressure; bad input; UTF-8 round trip; a failing step
#   serve-ceiling  gpt2-tiny, 32 closed-loop streams on /v1 (16-token prompts,
#                  480 tokens out: a mean context of 256) vs the offline decode
#                  ceiling at batch 32, context 256; ROUNDS pairs, alternating
#                  (target: served >= 0.85 x offline). Equal lengths keep the
#                  rows in step; CEILING_OUTPUT='{"dist":"uniform","min":320,
#                  "max":640}' staggers them (the same mean context, padded
#                  to the longest row)
#   serve-static   gpt2-tiny, continuous (/v1) vs static (/static/v1), 32
#                  closed-loop streams, prompts of 8-128 words, max_tokens
#                  lognormal (median 50, sigma 0.8, at most 256); ROUNDS pairs,
#                  alternating (target: continuous >= 2 x static)
#   serve-memory   gpt2-small served with --max-seqs SEQS: resident memory
#                  idle and with SEQS streams filling each --kv-tokens of
#                  KV_TOKENS
#   serve-defaults throughput, TTFT and ITL on the mixed load for a few
#                  --max-seqs,--max-batched-tokens (DEFAULTS_CONFIGS), behind
#                  the CPU defaults: DEFAULTS_MODEL (gpt2-tiny) and
#                  DEFAULTS_STREAMS (32) streams
# Usage: scripts/accept-gpt2.sh [section...] (default: all). MODELS
# (gpt2-tiny gpt2-mini), CONTEXT (256), DURATION (3s a point), KV_TOKENS
# (2048 4096 8192 16384), SEQS (16), ROUNDS (3), WINDOW (20s, a served run's
# measured window) and PORT (28100) override the settings. gpt2-small is
# generated into the model cache on first use
# (500 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup build
BIN=bin/infer
MODELS=${MODELS:-gpt2-tiny gpt2-mini}
CONTEXT=${CONTEXT:-256}
DURATION=${DURATION:-3s}
KV_TOKENS=${KV_TOKENS:-2048 4096 8192 16384}
SEQS=${SEQS:-16}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-20s}
PORT=${PORT:-28100}
CEILING_OUTPUT=${CEILING_OUTPUT:-480}
DEFAULTS_MODEL=${DEFAULTS_MODEL:-gpt2-tiny}
DEFAULTS_STREAMS=${DEFAULTS_STREAMS:-32}
read -r -a DEFAULTS_CONFIGS <<<"${DEFAULTS_CONFIGS:-16,256 16,512 16,2048 32,256 32,2048 8,256}"
DEFAULTS_CONFIGS=("${DEFAULTS_CONFIGS[@]/,/ }")
URL=http://127.0.0.1:$PORT
SECTIONS=${*:-exact ceiling layout memory calibrate serve-exact serve-ceiling serve-static serve-memory serve-defaults}
TMP=$(mktemp -d -t infer-gpt2.XXXXXX)
SERVER=

cleanup() {
	if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
	rm -rf "$TMP"
}
trap cleanup EXIT

serve() { # serve ARGS...: (re)start infer serve and wait until it is ready
	stop_server
	"$BIN" serve --addr "127.0.0.1:$PORT" --log-level warn --timeout 10m "$@" 2>"$TMP/server.log" &
	SERVER=$!
	for _ in $(seq 1200); do curl -sf "$URL/readyz" >/dev/null && return; sleep 0.1; done
	echo "server not ready"; cat "$TMP/server.log"; exit 1
}
stop_server() {
	if [ -n "$SERVER" ]; then kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; fi
}
load_driver() { [ -x "$TMP/load.test" ] || go test -c -o "$TMP/load.test" ./server/openai; }
# load PATH ENV...: a closed loop through loadgen/llm against $URL/PATH; prints its JSON line.
load() {
	local path=$1
	shift
	env INFER_LOAD_URL="$URL$path" INFER_LOAD_DURATION="$WINDOW" "$@" "$TMP/load.test" -test.run '^TestLoad$' -test.v |
		sed -n 's/^load: //p'
}
metric() { curl -s "$URL/metrics" | awk -v k="$1" '$1==k {print $2}'; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
rss_kib() { awk -v k="$1:" '$1==k {print $2}' "/proc/$SERVER/status"; }
# ratios A B...: pairs of figures, A1 B1 A2 B2 …; prints each ratio and their min/median/max
ratios() {
	python3 - "$@" <<'PY'
import statistics, sys
v = list(map(float, sys.argv[2:]))
r = [a / b for a, b in zip(v[0::2], v[1::2])]
print(f"{sys.argv[1]}: " + " ".join(f"{x:.3f}" for x in r) + f"  (min {min(r):.3f}, median {statistics.median(r):.3f}, max {max(r):.3f})")
PY
}

for section in $SECTIONS; do
	case $section in
	exact)
		echo "== exactness (real ONNX Runtime, gpt2-tiny)"
		INFER_REQUIRE_ORT=1 go test -count=1 -v -run 'TestDecoderIncremental|TestDecoderBatchComposition|TestDecoderSamplingDeterminism|TestORTReference' \
			./models/onnx ./models/gpt2 | grep -E '^(---|ok|FAIL)|within|equal'
		;;
	ceiling)
		for m in $MODELS; do
			echo "== offline decode ceiling: $m, context $CONTEXT"
			"$BIN" models bench "$m" --batch 1,8,32 --context "$CONTEXT" --prompts 32,128 --duration "$DURATION"
		done
		;;
	layout)
		echo "== KV layout and mixed steps (Go benchmarks; $MODELS)"
		INFER_BENCH_ARCHS=$(echo "$MODELS" | tr ' ' ',') INFER_REQUIRE_ORT=1 \
			go test -run '^$' -bench 'KVLayout|MixedStep' -benchtime 30x ./models/onnx | grep -E '^Benchmark'
		;;
	memory)
		for kv in $KV_TOKENS; do
			echo "== memory: gpt2-small, $SEQS sequences, --kv-tokens $kv"
			"$BIN" models bench gpt2-small --memory --seqs "$SEQS" --kv-tokens "$kv"
		done
		;;
	calibrate)
		echo "== sim-lm calibration: gpt2-tiny, context $CONTEXT"
		"$BIN" models calibrate gpt2-tiny --context "$CONTEXT" --prompts 32,128,256 --duration "$DURATION" | tail -3
		;;
	serve-exact)
		echo "== served exactness, bad input, UTF-8, step failure (real ONNX Runtime, gpt2-tiny, real HTTP clients)"
		INFER_REQUIRE_ORT=1 go test -count=1 -v -run 'TestServedGreedyAndSeededTextInCompany|TestServedUnderKVPressure|TestServedDecoderBadInput|TestServedTextRoundTrip|TestServedSplitCharacters|TestServedStepFailure' \
			./models/onnx | grep -E '^(--- |ok|FAIL)'
		;;
	serve-ceiling)
		echo "== served vs offline, gpt2-tiny, batch 32, context 256: $ROUNDS pairs, alternating"
		load_driver
		serve --model gpt2-tiny --max-seqs 32
		pairs=()
		steps() { # rows, steps, seconds in steps and wall seconds so far
			echo "$(metric 'infer_gen_step_batch_size_sum{endpoint="v1"}') $(metric 'infer_gen_step_batch_size_count{endpoint="v1"}')" \
				"$(metric 'infer_gen_step_duration_seconds_sum{endpoint="v1"}') $(date +%s.%N)"
		}
		for r in $(seq "$ROUNDS"); do
			off=$("$BIN" models bench gpt2-tiny --batch 32 --context 256 --prompts 16 --duration "$WINDOW" --json |
				python3 -c 'import json,sys; d=json.load(sys.stdin)["decode"][0]; print(d["items_per_sec"], d["mean_ms"])')
			before=$(steps)
			line=$(load /v1 INFER_LOAD_STREAMS=32 INFER_LOAD_PROMPT_TOKENS=16 "INFER_LOAD_OUTPUT_TOKENS=$CEILING_OUTPUT" INFER_LOAD_WARMUP=10s)
			served=$(field "$line" output_tokens_per_s)
			# Where the served time goes: the decoder's steps (their mean
			# rows and duration, against the offline step's) and the
			# engine's time between steps (HTTP, streaming, scheduling).
			python3 - "$r" $off "$served" $before $(steps) "$(field "$line" failed)" <<'PY'
import sys
r, off, off_ms, served = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rows0, n0, dur0, t0, rows1, n1, dur1, t1 = map(float, sys.argv[5:13])
n = max(1, n1 - n0)
print(f"  round {r}: offline {off:.0f} tokens/s (step {off_ms:.2f} ms), served {served:.0f} tokens/s: {(rows1-rows0)/n:.1f} rows a step, "
      f"step {(dur1-dur0)/n*1e3:.2f} ms, decoder busy {(dur1-dur0)/(t1-t0)*100:.0f}% of the run; failed {sys.argv[13]}")
PY
			pairs+=("$served" "${off%% *}")
		done
		stop_server
		ratios "served / offline (target >= 0.85)" "${pairs[@]}"
		;;
	serve-static)
		echo "== continuous vs static, gpt2-tiny, 32 streams, prompts 8-128 words, max_tokens lognormal(50, 0.8) <= 256: $ROUNDS pairs"
		load_driver
		serve --model gpt2-tiny --max-seqs 32
		mixed=(INFER_LOAD_STREAMS=32 INFER_LOAD_PROMPT_WORDS=8-128 INFER_LOAD_WARMUP=10s
			'INFER_LOAD_OUTPUT_TOKENS={"dist":"lognormal","median":50,"sigma":0.8,"max":256}')
		pairs=()
		for r in $(seq "$ROUNDS"); do
			cont=$(load /v1 "${mixed[@]}")
			stat=$(load /static/v1 "${mixed[@]}")
			printf '  round %d: continuous %.0f tokens/s (TTFT p50 %s ms), static %.0f tokens/s (TTFT p50 %s ms)\n' "$r" \
				"$(field "$cont" output_tokens_per_s)" "$(field "$cont" ttft_p50_ms)" "$(field "$stat" output_tokens_per_s)" "$(field "$stat" ttft_p50_ms)"
			pairs+=("$(field "$cont" output_tokens_per_s)" "$(field "$stat" output_tokens_per_s)")
		done
		stop_server
		ratios "continuous / static (target >= 2)" "${pairs[@]}"
		;;
	serve-memory)
		load_driver
		for kv in $KV_TOKENS; do
			per=$((kv / SEQS))
			echo "== served memory: gpt2-small, --max-seqs $SEQS --kv-tokens $kv: $SEQS streams of $((per - 24)) prompt + 16 generated tokens"
			serve --model gpt2-small --max-seqs "$SEQS" --kv-tokens "$kv"
			idle=$(rss_kib VmRSS)
			line=$(load /v1 INFER_LOAD_STREAMS="$SEQS" INFER_LOAD_PROMPT_TOKENS=$((per - 24)) INFER_LOAD_OUTPUT_TOKENS=16 INFER_LOAD_WARMUP=0s INFER_LOAD_DURATION=1s INFER_LOAD_DRAIN=10m)
			printf '  RSS idle %d MiB, peak %d MiB (KV bound %d MiB), %s streams completed, %s failed, preemptions %s\n' $((idle / 1024)) \
				$(($(rss_kib VmHWM) / 1024)) $((kv * 72 / 1024)) "$(field "$line" completed)" "$(field "$line" failed)" \
				"$(metric 'infer_gen_num_preemptions_total{endpoint="v1"}')"
		done
		stop_server
		;;
	serve-defaults)
		echo "== engine settings on the CPU: $DEFAULTS_MODEL, $DEFAULTS_STREAMS streams of the mixed load on /v1"
		load_driver
		for cfg in "${DEFAULTS_CONFIGS[@]}"; do
			set -- $cfg
			serve --model "$DEFAULTS_MODEL" --max-seqs "$1" --max-batched-tokens "$2"
			line=$(load /v1 INFER_LOAD_STREAMS="$DEFAULTS_STREAMS" INFER_LOAD_PROMPT_WORDS=8-128 INFER_LOAD_WARMUP=5s \
				'INFER_LOAD_OUTPUT_TOKENS={"dist":"lognormal","median":50,"sigma":0.8,"max":256}')
			printf '  --max-seqs %-3s --max-batched-tokens %-5s %6.0f tokens/s  TTFT p50 %7.1f p99 %7.1f ms  ITL p50 %5.1f p99 %6.1f ms\n' "$1" "$2" \
				"$(field "$line" output_tokens_per_s)" "$(field "$line" ttft_p50_ms)" "$(field "$line" ttft_p99_ms)" \
				"$(field "$line" itl_p50_ms)" "$(field "$line" itl_p99_ms)"
		done
		stop_server
		;;
	*)
		echo "unknown section $section (want exact, ceiling, layout, memory, calibrate, serve-exact, serve-ceiling, serve-static, serve-memory, serve-defaults)" >&2
		exit 2
		;;
	esac
done
