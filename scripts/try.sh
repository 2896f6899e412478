#!/usr/bin/env bash
# A walk through the HTTP API (make try). Serves the default model (bert-mini, fill-mask: generated on first use into
# the model cache, run by ONNX Runtime from scripts/setup-ort.sh) on
# 127.0.0.1:8080, waits until it is ready, sends requests through the naive and
# the batched endpoint and KServe v2 with text, JSON and form bodies, and stops
# the server. Extra arguments go to `infer serve` (e.g. --model sim).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/infer}
ADDR=${ADDR:-127.0.0.1:8080}
LOG=$(mktemp -t infer-serve.XXXXXX.log)

"$BIN" serve --addr "$ADDR" "$@" >"$LOG" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT

# Generating a large built-in model the first time takes a while.
for _ in $(seq 1 1200); do
	if curl -fsS "http://$ADDR/readyz" >/dev/null 2>&1; then break; fi
	if ! kill -0 $PID 2>/dev/null; then cat "$LOG"; exit 1; fi
	sleep 0.1
done
curl -fsS "http://$ADDR/readyz"
# The model's name, for the KServe path, from the server's "listening" log line.
MODEL=$(sed -n 's/.*msg=listening.* model=\([^ ]*\).*/\1/p' "$LOG" | head -1)

echo; echo "== POST /batched (text body)"
curl -sS -i -d 'Paris is the [MASK] of France.' "http://$ADDR/batched"
echo; echo "== POST /naive (text body)"
curl -sS -d 'Paris is the [MASK] of France.' "http://$ADDR/naive"
echo; echo "== POST /batched (JSON body, two items)"
curl -sS -H 'Content-Type: application/json' -d '{"inputs": ["Paris is the [MASK] of France.", "The cat sat on the [MASK]."]}' "http://$ADDR/batched"
echo; echo "== POST /naive (form body, two items)"
curl -sS --data-urlencode 's=Paris is the [MASK] of France.' --data-urlencode 's=The cat sat on the [MASK].' "http://$ADDR/naive"
echo; echo "== POST /v2/models/$MODEL/infer (KServe v2)"
curl -sS -H 'Content-Type: application/json' \
	-d '{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["Paris is the [MASK] of France."]}]}' \
	"http://$ADDR/v2/models/$MODEL/infer"

echo; echo "== server-side batch sizes (from /metrics)"
curl -sS "http://$ADDR/metrics" | grep -E '^infer_batch_size_(sum|count)'
echo; echo "server log: $LOG"
