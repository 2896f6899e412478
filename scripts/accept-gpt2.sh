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
# and served through `infer serve`, loaded by `infer bench` (the scenarios
# named; edit them for other models, lengths or settings):
#   serve-exact    the served tests: greedy and seeded text alone = in company
#                  of 15 streams on /v1, /static/v1, /naive/v1; under KV
#                  pressure; bad input; UTF-8 round trip; a failing step
#   serve-ceiling  scenarios/llm-onnx-ceiling.yaml (gpt2-tiny, 32 closed-loop
#                  streams on /v1, 16-token prompts, 480 tokens out: a mean
#                  context of 256) against the offline decode ceiling at
#                  batch 32, context 256; ROUNDS pairs, alternating (target:
#                  served >= 0.85 x offline), with where the served time goes
#   serve-staggered the same with scenarios/llm-onnx-staggered.yaml (320 to
#                  640 tokens out, the same mean context: each step padded to
#                  its longest row); target: served >= 0.85 x offline
#   serve-beside   what the serving work outside the decoder costs it: the
#                  offline decode bench alone, then beside sim-lm (7 ms
#                  steps, no model CPU) serving the staggered load to an
#                  infer bench client on the same cores, with the CPU a
#                  token of that client and server; ROUNDS pairs
#   serve-static   scenarios/llm-onnx-static.yaml (gpt2-tiny, continuous on
#                  /v1 vs static on /static/v1, 32 closed-loop streams, mixed
#                  lengths); ROUNDS runs (target: continuous >= 2 x static)
#   serve-memory   gpt2-small served with --max-seqs SEQS: resident memory
#                  idle and with SEQS streams filling each --kv-tokens of
#                  KV_TOKENS (the load of scenarios/llm-onnx-memory.yaml, its
#                  prompts sized to the bound)
#   serve-defaults scenarios/llm-onnx-defaults.yaml: throughput, TTFT and ITL
#                  on the mixed load for each --max-seqs and
#                  --max-batched-tokens, behind the CPU defaults
# Usage: scripts/accept-gpt2.sh [section...] (default: all). MODELS
# (gpt2-tiny gpt2-mini), CONTEXT (256), DURATION (3s a point), KV_TOKENS
# (2048 4096 8192 16384), SEQS (16), ROUNDS (3), WINDOW (20s, a served
# run's measured window) and PORT (28100) override the settings. gpt2-small
# is generated into the model cache on first use (500 MB). The bench runs
# are kept in results/accept-gpt2-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
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
URL=http://127.0.0.1:$PORT
SECTIONS=${*:-exact ceiling layout memory calibrate serve-exact serve-ceiling serve-staggered serve-beside serve-static serve-memory serve-defaults}
TMP=$(mktemp -d -t infer-gpt2.XXXXXX)
RESULTS=results/accept-gpt2-$(date -u +%Y%m%dT%H%M%S)
trap 'stop_server; rm -rf "$TMP"' EXIT

# ratios LABEL A1 B1 A2 B2...: each A / B, and their min, median and max.
ratios() {
	python3 - "$@" <<'PY'
import statistics, sys
v = list(map(float, sys.argv[2:]))
r = [a / b for a, b in zip(v[0::2], v[1::2])]
print(f"{sys.argv[1]}: " + " ".join(f"{x:.3f}" for x in r) + f"  (min {min(r):.3f}, median {statistics.median(r):.3f}, max {max(r):.3f})")
PY
}
# offline: the offline decode ceiling, gpt2-tiny at batch 32 and context
# 256, as "tokens/s step-ms".
offline() {
	"$BIN" models bench gpt2-tiny --batch 32 --context 256 --prompts 16 --duration "$WINDOW" --json |
		jq -r '.decode[0] | "\(.items_per_sec) \(.mean_ms)"'
}
# run NAME SCENARIO [FLAGS...]: infer bench of SCENARIO into $RESULTS/NAME;
# prints the run directory.
run() {
	local out=$RESULTS/$1 sc=$2
	shift 2
	mkdir -p "$RESULTS"
	bench "$BIN" "$sc" "$out" "$@" >&2 || exit 1
	echo "$out"
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
			go test -run '^$' -bench 'KVLayout|MixedStep|LogitsToKeep' -benchtime 30x ./models/onnx | grep -E '^Benchmark'
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
	serve-ceiling | serve-staggered)
		sc=llm-onnx-ceiling
		if [ "$section" = serve-staggered ]; then sc=llm-onnx-staggered; fi
		echo "== served vs offline, gpt2-tiny, batch 32, context 256: $ROUNDS pairs, alternating (scenarios/$sc.yaml)"
		pairs=()
		for r in $(seq "$ROUNDS"); do
			read -r off off_ms < <(offline)
			out=$(run "$section-$r" "$sc" --duration "$WINDOW")
			# Where the served time goes: the decoder's steps (their mean rows
			# and duration, against the offline step's) and the engine's time
			# between steps (HTTP, streaming, scheduling).
			# And the CPU of the two processes sharing the cores, per
			# generated token: the bench client's (generator_cpu, cores)
			# and the server's (its process CPU over the window).
			read -r served rows step busy failed client_us server_us < <(jq -r '"\(.llm.output_tokens_per_s) \(.llm.server.step_batch_mean) \(.llm.server.step_mean_ms) \(.llm.server.step_busy) \(.llm.failed) \(1e6 * (.generator_cpu // 0) / .llm.output_tokens_per_s) \(1e6 * (.server.cpu_seconds // 0) / .llm.output_tokens)"' "$out/results.jsonl")
			LC_ALL=C printf '  round %d: offline %.0f tokens/s (step %.2f ms), served %.0f tokens/s: %.1f rows a step, step %.2f ms, decoder busy %.0f%% of the window; failed %s; CPU a token: client %.0f µs, server %.0f µs; load %s\n' \
				"$r" "$off" "$off_ms" "$served" "$rows" "$step" "$(awk -v b="$busy" 'BEGIN {print b * 100}')" "$failed" "$client_us" "$server_us" "$(cut -d' ' -f1 /proc/loadavg)"
			pairs+=("$served" "$off")
		done
		ratios "served / offline (target >= 0.85)" "${pairs[@]}"
		;;
	serve-beside)
		echo "== offline decode alone vs beside sim-lm serving the staggered load (32 streams) to infer bench: $ROUNDS pairs"
		sed -e 's/^  model: gpt2-tiny/  model: sim-lm/' -e '/max_seqs/d' scenarios/llm-onnx-staggered.yaml >"$TMP/beside.yaml"
		tokens() { curl -fsS "$URL/metrics" | awk '$1 ~ /^infer_gen_generation_tokens_total/ {n += $2} END {print n + 0}'; }
		hz=$(getconf CLK_TCK)
		pairs=()
		for r in $(seq "$ROUNDS"); do
			read -r alone alone_ms < <(offline)
			la=$(cut -d' ' -f1 /proc/loadavg)
			serve --model sim-lm --sim-step 7ms --sim-per-seq 0 --max-seqs 32 --timeout 10m
			mkdir -p "$RESULTS"
			# Longer than the offline bench; stopped when it is done.
			"$BIN" bench -s "$TMP/beside.yaml" --target "$URL" --no-tui --report=false -o "$RESULTS/beside-$r" --duration 10m >"$RESULTS/beside-$r.log" 2>&1 &
			client=$!
			sleep 12 # past the bench's 10 s warm-up
			read -r c0 s0 k0 t0 < <(echo "$(cpu_ticks "$client") $(cpu_ticks) $(tokens) $(date +%s.%N)")
			read -r beside beside_ms < <(offline)
			read -r c1 s1 k1 t1 < <(echo "$(cpu_ticks "$client") $(cpu_ticks) $(tokens) $(date +%s.%N)")
			lb=$(cut -d' ' -f1 /proc/loadavg)
			kill -INT "$client" 2>/dev/null || true
			wait "$client" || true
			stop_server
			awk -v r="$r" -v a="$alone" -v am="$alone_ms" -v la="$la" -v b="$beside" -v bm="$beside_ms" -v lb="$lb" -v hz="$hz" \
				-v c="$((c1 - c0))" -v s="$((s1 - s0))" -v k="$(awk -v x="$k0" -v y="$k1" 'BEGIN {print y - x}')" -v t="$(awk -v x="$t0" -v y="$t1" 'BEGIN {print y - x}')" \
				'BEGIN {printf "  round %d: alone %.0f tokens/s (step %.2f ms, load %s), beside %.0f tokens/s (step %.2f ms, load %s): %.3f; beside it %.0f tokens/s streamed, client %.0f µs and server %.0f µs of CPU a token (%.2f cores)\n",
					r, a, am, la, b, bm, lb, b / a, k / t, 1e6 * c / hz / k, 1e6 * s / hz / k, (c + s) / hz / t}'
			pairs+=("$beside" "$alone")
		done
		ratios "offline beside the serving work / alone" "${pairs[@]}"
		;;
	serve-static)
		echo "== continuous vs static, gpt2-tiny, 32 streams, mixed lengths: $ROUNDS runs of scenarios/llm-onnx-static.yaml"
		pairs=()
		for r in $(seq "$ROUNDS"); do
			out=$(run "static-$r" llm-onnx-static --duration "$WINDOW")
			read -r cont cont_ttft stat stat_ttft < <(jq -rs 'INDEX(.point.endpoint) | [.continuous, .static] | map("\(.llm.output_tokens_per_s) \(.llm.ttft_ms.p50)") | join(" ")' "$out/results.jsonl")
			LC_ALL=C printf '  round %d: continuous %.0f tokens/s (TTFT p50 %.0f ms), static %.0f tokens/s (TTFT p50 %.0f ms)\n' "$r" "$cont" "$cont_ttft" "$stat" "$stat_ttft"
			pairs+=("$cont" "$stat")
		done
		ratios "continuous / static (target >= 2)" "${pairs[@]}"
		;;
	serve-memory)
		for kv in $KV_TOKENS; do
			prompt=$((kv / SEQS - 24))
			echo "== served memory: gpt2-small, --max-seqs $SEQS --kv-tokens $kv: $SEQS streams of $prompt prompt + 16 generated tokens"
			serve --timeout 10m --model gpt2-small --max-seqs "$SEQS" --kv-tokens "$kv"
			idle=$(rss_kib VmRSS)
			sed -e "s/^  prompt_tokens: .*/  prompt_tokens: $prompt/" -e "s/^  concurrency: .*/  concurrency: $SEQS/" \
				scenarios/llm-onnx-memory.yaml >"$TMP/memory-$kv.yaml"
			out=$(run "memory-$kv" "$TMP/memory-$kv.yaml" --target "$URL")
			read -r completed failed < <(jq -r '.llm | "\(.completed) \(.failed)"' "$out/results.jsonl")
			printf '  RSS idle %d MiB, peak %d MiB (KV bound %d MiB), %s streams completed, %s failed, preemptions %s\n' $((idle / 1024)) \
				$(($(rss_kib VmHWM) / 1024)) $((kv * 72 / 1024)) "$completed" "$failed" \
				"$(metric 'infer_gen_num_preemptions_total{endpoint="v1"}')"
			stop_server
		done
		;;
	serve-defaults)
		echo "== engine settings on the CPU: scenarios/llm-onnx-defaults.yaml (the mixed load on /v1)"
		out=$(run defaults llm-onnx-defaults --duration "$WINDOW")
		jq -r '[.point.max_seqs, .point.max_batched_tokens, .llm.output_tokens_per_s, .llm.ttft_ms.p50, .llm.ttft_ms.p99, .llm.itl_ms.p50, .llm.itl_ms.p99] | @tsv' "$out/results.jsonl" |
			while read -r seqs mbt tps ttft50 ttft99 itl50 itl99; do
				LC_ALL=C printf '  --max-seqs %-3s --max-batched-tokens %-5s %6.0f tokens/s  TTFT p50 %7.1f p99 %7.1f ms  ITL p50 %5.1f p99 %6.1f ms\n' \
					"$seqs" "$mbt" "$tps" "$ttft50" "$ttft99" "$itl50" "$itl99"
			done
		;;
	*)
		echo "unknown section $section (want exact, ceiling, layout, memory, calibrate, serve-exact, serve-ceiling, serve-staggered, serve-beside, serve-static, serve-memory, serve-defaults)" >&2
		exit 2
		;;
	esac
done
if [[ -d $RESULTS ]]; then echo "bench runs in $RESULTS"; fi
