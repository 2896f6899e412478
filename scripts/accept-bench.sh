#!/usr/bin/env bash
# Acceptance checks of infer bench's measurement fixes (issue 12, "fix in
# today's bench first") and of make try's port handling (issue 15), with the
# figures they print. Usage: scripts/accept-bench.sh [stall|foreign|batch|try]...
# (default: all). Each check is bounded to well under a minute.
#
#   stall    a server stalls 1.5 s at 200 req/s with 5 requests in flight at
#            most: the service-time p99, the schedule lag and the p99 from
#            the intended send time (wrk2's correction), and the flag
#   foreign  a server answering {"ok": true} with no /readyz, /metrics or
#            Server-Timing: measured by status, each gap said once
#   batch    batches alternating 1 and 31 items: mean batch (each batch once)
#            vs the response-weighted figure
#   try      make try while another server holds PORT (default 8080): it
#            works on a port of its own; pointed at PORT it fails loudly
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
checks=("$@")
[[ ${#checks[@]} -gt 0 ]] || checks=(stall foreign batch try)

for c in "${checks[@]}"; do
	case $c in
	stall)
		echo "== stall: a 1.5 s stall caught up in a burst (go test -run TestRunCaughtUpStall)"
		go test ./loadgen -run 'TestRunCaughtUpStall$' -count=1 -v | grep -E 'achieved|^(--- |ok|FAIL)'
		;;
	foreign)
		echo "== foreign: a server that is not infer's (go test -run TestRunForeignServer)"
		go test ./loadgen ./loadgen/target -run 'TestRunForeignServer$|TestProbeReadiness$' -count=1 -v | grep -E '^(--- |ok|FAIL)'
		;;
	batch)
		echo "== batch: mean batch weighting (go test -run TestTallyMeanBatch)"
		go test ./loadgen/attack ./loadgen -run 'TestTallyMeanBatch$|TestRowMeanBatch$' -count=1 -v | grep -E '^(--- |ok|FAIL)'
		;;
	try)
		PORT=${PORT:-8080}
		BIN=${BIN:-bin/infer}
		[[ -x $BIN ]] || make build >/dev/null
		echo "== try: with a server already on 127.0.0.1:$PORT"
		"$BIN" serve --model sim --sim-fixed 1ms --addr "127.0.0.1:$PORT" >/dev/null 2>&1 &
		other=$!
		trap 'kill -INT $other 2>/dev/null || true; wait $other 2>/dev/null || true' EXIT
		await_ready "http://127.0.0.1:$PORT" "$other" 5 || true
		if ./scripts/try.sh --model sim --sim-fixed 1ms >/dev/null 2>&1; then
			echo "make try on its own port: exit 0 (passed)"
		else
			echo "make try on its own port: FAILED"
			exit 1
		fi
		set +e
		out=$(ADDR="127.0.0.1:$PORT" ./scripts/try.sh --model sim 2>&1)
		code=$?
		set -e
		echo "make try with ADDR=127.0.0.1:$PORT (taken): exit $code: $(grep -m1 '^try:' <<<"$out")"
		[[ $code -ne 0 ]] || exit 1
		kill -INT $other
		wait $other 2>/dev/null || true
		trap - EXIT
		;;
	*)
		echo "accept-bench: unknown check $c (want stall, foreign, batch or try)" >&2
		exit 2
		;;
	esac
done
