#!/usr/bin/env bash
# Serves the default model on 127.0.0.1:8080, waits until it is ready, sends
# the same request to the naive and the batched endpoint, and stops the
# server. Extra arguments go to `infer serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/infer}
ADDR=${ADDR:-127.0.0.1:8080}
LOG=$(mktemp -t infer-serve.XXXXXX.log)

"$BIN" serve --addr "$ADDR" "$@" >"$LOG" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do
	if curl -fsS "http://$ADDR/readyz" >/dev/null 2>&1; then break; fi
	if ! kill -0 $PID 2>/dev/null; then cat "$LOG"; exit 1; fi
	sleep 0.1
done
curl -fsS "http://$ADDR/readyz"

echo; echo "== POST /batched (text body)"
curl -sS -i -d 'Paris is the [MASK] of France.' "http://$ADDR/batched"
echo; echo "== POST /naive (JSON body, two items)"
curl -sS -H 'Content-Type: application/json' -d '{"inputs": ["Paris is the [MASK] of France.", "The cat sat on the [MASK]."]}' "http://$ADDR/naive"

echo; echo "== server-side batch sizes (from /metrics)"
curl -sS "http://$ADDR/metrics" | grep -E '^infer_batch_size_(sum|count)'
echo; echo "server log: $LOG"
