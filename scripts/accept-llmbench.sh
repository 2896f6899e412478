#!/usr/bin/env bash
# Reruns issue 12's acceptance measurements through `infer bench` end to
# end (scenario → run directory → records), against loadgen/llm/llmtest's
# fake OpenAI servers in a child process and against infer's own sim-lm
# server:
#   accuracy  TTFT and ITL p50 within 1 ms of what the fake achieved, TPOT
#             from usage (chunks carry 1–2 tokens), the chat role chunk
#             not taken for the first token; vLLM, TGI, llama.cpp, Ollama
#   simlm     the bench's TTFT against infer serve's own: Server-Timing per
#             request, and its /metrics histogram (infer_gen_*)
#   foreign   no /metrics, no Server-Timing, no usage: said once, flagged,
#             exit 0; mid-stream errors and dropped streams by cause
#   cost      1,000 concurrent streams (a chunk every 8 ms, then 40 ms):
#             infer bench's CPU; an open loop of 100 req/s × 200 tokens,
#             constant and Poisson: sent against the schedule
#   reports   scenarios/llm-sim.yaml, llm-sim-closed.yaml and
#             llm-sim-poisson.yaml run in full (about 20 minutes) into
#             results/, with their reports
# Every figure is printed on an "ACCEPT" line. Knobs: LLMBENCH_ACCEPT_STREAMS
# (1000), LLMBENCH_ACCEPT_RATE (100). Usage: scripts/accept-llmbench.sh [section...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

declare -A TESTS=([accuracy]=TestAcceptBenchAccuracy [simlm]=TestAcceptBenchSimLM [foreign]=TestAcceptBenchForeign [cost]=TestAcceptBenchCost)
SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(accuracy simlm foreign cost); fi
reports=0
tests=()
for s in "${SECTIONS[@]}"; do
	if [[ $s == reports ]]; then reports=1; else tests+=("$s"); fi
done
OTHER_SECTIONS=reports section_tests "${tests[@]}"
status=0
if [[ ${#RUN[@]} -gt 0 ]]; then
	echo "== through infer bench: ${RUN[*]}"
	accept_tests ./cmd INFER_LLMBENCH_ACCEPT 30m "${RUN[@]}" || status=$?
fi
if [[ $reports -eq 1 ]]; then
	make build >/dev/null
	for s in llm-sim llm-sim-closed llm-sim-poisson; do
		dir=results/accept-$s
		rm -rf "$dir"
		echo "== scenarios/$s.yaml → $dir"
		bin/infer bench -s "scenarios/$s.yaml" --no-tui --out "$dir" 2>/dev/null | sed 's/^/ACCEPT '"$s"': /' || true
	done
fi
exit $status
