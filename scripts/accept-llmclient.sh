#!/usr/bin/env bash
# Reruns the LLM load client's acceptance measurements (issue 12, "Accuracy"
# and "Cost") against the OpenAI-compatible fake server of
# loadgen/llm/llmtest, over real loopback sockets, the fake in a child
# process so that the CPU measured is the client's alone:
#   accuracy  TTFT, ITL, TPOT p50 against the fake's nominal and achieved
#             timing (40 ms, then a chunk every 8 ms, every 3rd chunk two
#             tokens), for the vLLM, TGI, llama.cpp and Ollama wire forms
#   foreign   a server without usage is flagged; mid-stream errors and a
#             dropped connection are counted by cause
#   cost      1,000 concurrent streams, a chunk every 8 ms each and again
#             every 40 ms (where chunks come one a socket read): client CPU,
#             chunks a read, CPU a chunk
#   schedule  an open loop of 100 req/s x 200 tokens, constant and Poisson:
#             achieved rate vs the schedule, schedule lag
# Every figure is printed on an "ACCEPT" line. Knobs: LLM_ACCEPT_STREAMS
# (1000), LLM_ACCEPT_INTERVAL_MS (only this interval), LLM_ACCEPT_RATE (100),
# LLM_ACCEPT_SECONDS (window: 8 for cost, 10 for schedule). Usage: scripts/accept-llmclient.sh [section...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

declare -A TESTS=([accuracy]=TestAcceptAccuracy [foreign]=TestAcceptForeign [cost]=TestAcceptCost [schedule]=TestAcceptSchedule)
SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(accuracy foreign cost schedule); fi
section_tests "${SECTIONS[@]}"
echo "== the exact-timing checks (synctest, virtual clock): go test ./loadgen/llm/... -run 'Accuracy|Run'"
go test -count=1 -run 'TestAccuracy|TestRun' ./loadgen/llm/...

echo "== acceptance over real sockets: ${SECTIONS[*]}"
accept_tests ./loadgen/llm INFER_LLM_ACCEPT 15m "${RUN[@]}"
