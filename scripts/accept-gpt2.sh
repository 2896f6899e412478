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
# Usage: scripts/accept-gpt2.sh [section...] (default: all). MODELS
# (gpt2-tiny gpt2-mini), CONTEXT (256), DURATION (3s a point), KV_TOKENS
# (2048 4096 8192 16384) and SEQS (16) override the settings. gpt2-small is
# generated into the model cache on first use (500 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup build
BIN=bin/infer
MODELS=${MODELS:-gpt2-tiny gpt2-mini}
CONTEXT=${CONTEXT:-256}
DURATION=${DURATION:-3s}
KV_TOKENS=${KV_TOKENS:-2048 4096 8192 16384}
SEQS=${SEQS:-16}
SECTIONS=${*:-exact ceiling layout memory calibrate}

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
	*)
		echo "unknown section $section (want exact, ceiling, layout, memory, calibrate)" >&2
		exit 2
		;;
	esac
done
