#!/usr/bin/env bash
# A walk through the HTTP API (make try). Serves the default model (bert-mini,
# fill-mask: generated on first use into the model cache, run by ONNX Runtime
# from scripts/setup-ort.sh) on a free port of its own, waits until it is
# ready, sends requests through the naive and the batched endpoint and KServe
# v2 with text, JSON and form bodies, checks every answer, and stops the
# server. It exits 1 if any step fails. Extra arguments go to `infer serve`
# (e.g. --model sim); ADDR=host:port serves on that address instead (a taken
# port fails at once).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/infer}
ADDR=${ADDR:-127.0.0.1:0}
WORK=$(mktemp -d -t infer-try.XXXXXX)
LOG=$WORK/serve.log
PID=

stop() {
	if [[ -n $PID ]]; then
		kill -INT "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
}
trap stop EXIT
fail() {
	echo "try: $*" >&2
	echo "try: server log: $LOG" >&2
	exit 1
}

"$BIN" serve --addr "$ADDR" "$@" >"$LOG" 2>&1 &
PID=$!

# The address it listens on (port 0: the one the system chose), from the
# server's "listening" log line.
URL=
for _ in $(seq 1 100); do
	if ! kill -0 "$PID" 2>/dev/null; then
		cat "$LOG" >&2
		fail "infer serve --addr $ADDR exited before it listened (see its output above)"
	fi
	addr=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$LOG" | head -1)
	if [[ -n $addr ]]; then
		URL=http://$addr
		break
	fi
	sleep 0.1
done
[[ -n $URL ]] || fail "infer serve did not say where it listens within 10 s"
echo "== infer serve listening on $URL (pid $PID)"

# Generating a large built-in model the first time takes a while.
ready=
for _ in $(seq 1 1200); do
	if ready=$(curl -fsS "$URL/readyz" 2>/dev/null); then break; fi
	ready=
	if ! kill -0 "$PID" 2>/dev/null; then
		cat "$LOG" >&2
		fail "infer serve exited before it was ready (see its output above)"
	fi
	sleep 0.1
done
[[ -n $ready ]] || fail "$URL/readyz not ready after 120 s"
echo "$ready"
# The model's name, for the KServe path.
MODEL=$(sed -n 's/.*"model":"\([^"]*\)".*/\1/p' <<<"$ready")
[[ -n $MODEL ]] || fail "/readyz did not name the model: $ready"

failed=0
# step TITLE WANT CURL-ARGS...: sends one request, prints the answer, and
# checks that it is a 200 whose body holds WANT.
step() {
	local title=$1 want=$2
	shift 2
	echo
	echo "== $title"
	local code
	code=$(curl -sS -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' "$@") || code=000
	grep -i '^server-timing:' "$WORK/headers" || true
	cat "$WORK/body"
	[[ -z $(tail -c1 "$WORK/body") ]] || echo
	if [[ $code != 200 ]]; then
		echo "FAIL: HTTP $code, want 200" >&2
		failed=$((failed + 1))
	elif ! grep -q -- "$want" "$WORK/body"; then
		echo "FAIL: the answer lacks $want" >&2
		failed=$((failed + 1))
	fi
}

TEXT='Paris is the [MASK] of France.'
step "POST /batched (text body)" '"outputs"' -d "$TEXT" "$URL/batched"
step "POST /naive (text body)" '"outputs"' -d "$TEXT" "$URL/naive"
step "POST /batched (JSON body, two items)" '"outputs"' -H 'Content-Type: application/json' \
	-d '{"inputs": ["Paris is the [MASK] of France.", "The cat sat on the [MASK]."]}' "$URL/batched"
step "POST /naive (form body, two items)" '"outputs"' --data-urlencode "s=$TEXT" \
	--data-urlencode 's=The cat sat on the [MASK].' "$URL/naive"
step "POST /v2/models/$MODEL/infer (KServe v2)" '"outputs"' -H 'Content-Type: application/json' \
	-d '{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["Paris is the [MASK] of France."]}]}' \
	"$URL/v2/models/$MODEL/infer"
echo
echo "== GET /metrics: server-side batch sizes"
if curl -fsS "$URL/metrics" >"$WORK/metrics" && grep -E '^infer_batch_size_(sum|count)' "$WORK/metrics"; then
	:
else
	echo "FAIL: /metrics lacks infer_batch_size" >&2
	failed=$((failed + 1))
fi

echo
if ((failed > 0)); then
	fail "$failed step(s) failed"
fi
echo "== every step answered as expected; stopping the server"
stop
PID=
rm -rf "$WORK"
