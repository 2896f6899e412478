#!/usr/bin/env bash
# Measures what a script can measure of generative serving (issue 10) against a
# real `infer serve --model sim-lm` on 127.0.0.1, without the LLM bench:
#   cpu         server CPU per streamed token at saturation, from /proc
#               (CONCURRENCY curl streams in closed loop for DURATION)
#   floor       the same for infer serve and for internal/ssefloor (the
#               least a Go net/http server does to stream the same chunks
#               at the same pace), in turn, ROUNDS (2) pairs
#   floorcache  the floor's pairs with the prefix cache at work: prompts of
#               16 shared 128-word prefixes and questions of their own,
#               --prefix-cache=true, the server's hit rate beside each pair
#   streams     STREAMS concurrent streams held, and the server's RSS
#   slow        a client that stops reading: the others go on, and the slow
#               stream ends (cut, or absorbed by the kernel's socket buffers)
#   disconnect  a client that leaves mid-stream: its sequence leaves at the
#               next step (running gauge, aborted counter, KV usage)
#   badinput    bad requests get their documented errors while a valid load
#               sees none
# Throughput (continuous vs the ideal and vs static) and TTFT under Poisson
# load need the LLM bench (infer bench); the engine's own figures on the sim,
# in virtual time, come from: go test -run Sim -v ./server/generate
# Needs curl and python3. Every load is bounded in time and count.
# Usage: scripts/accept-gen.sh [section...] (default: all). BIN=path runs
# another build of infer (e.g. to compare two builds in turn).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [ -z "${BIN:-}" ]; then make -s build; fi
BIN=${BIN:-bin/infer}
PORT=${PORT:-23100}
URL=http://127.0.0.1:$PORT
DURATION=${DURATION:-30}
CONCURRENCY=${CONCURRENCY:-64}
STREAMS=${STREAMS:-1000}
ROUNDS=${ROUNDS:-2}
SERVE_ENV=${SERVE_ENV:-} # e.g. "env GOMAXPROCS=1", before the server command
STOP_SIGNAL=TERM
TMP=$(mktemp -d -t infer-gen.XXXXXX)
command -v python3 >/dev/null || { echo "python3 missing"; exit 1; }

cleanup() {
	stop_server
	jobs -p | xargs -r kill 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

cpu_s() { awk -v t="$(cpu_ticks "$SERVER")" 'BEGIN {print t / 100}'; }
rss_mib() { awk -v k="$(rss_kib VmRSS)" 'BEGIN {printf "%.0f", k / 1024}'; }
# 256 request bodies like the acceptance load: prompts of 32–512 words,
# max_tokens lognormal (median 100, sigma 0.8, at most 1024), ignore_eos.
python3 - "$TMP" <<'PY'
import json, math, random, sys
r = random.Random(1)
words = "the of and to in is was for it with as on be at by had are but from or have an they which one you were all".split()
for i in range(256):
    prompt = " ".join(r.choice(words) for _ in range(r.randint(32, 512)))
    m = min(1024, max(1, round(100 * math.exp(0.8 * r.gauss(0, 1)))))
    with open(f"{sys.argv[1]}/body.{i}", "w") as f:
        json.dump({"prompt": prompt, "max_tokens": m, "ignore_eos": True, "stream": True}, f)
# shared.*: the same lengths in and out as body.* on average, prompts of
# one of 16 prefixes of 128 words and a question of 16–272 words of their
# own (floorcache).
prefixes = [" ".join(r.choice(words) for _ in range(128)) for _ in range(16)]
for i in range(256):
    prompt = prefixes[i % 16] + " " + " ".join(r.choice(words) for _ in range(r.randint(16, 272)))
    m = min(1024, max(1, round(100 * math.exp(0.8 * r.gauss(0, 1)))))
    with open(f"{sys.argv[1]}/shared.{i}", "w") as f:
        json.dump({"prompt": prompt, "max_tokens": m, "ignore_eos": True, "stream": True}, f)
PY
BODY=body # the request bodies stream_loop sends: body.* or shared.*

# stream_loop ID SECONDS: one closed-loop client of streamed completions.
stream_loop() {
	local end=$((SECONDS + $2)) i=$(($1 * 7))
	while [ $SECONDS -lt $end ]; do
		i=$((i + 1))
		code=$(curl -sN -o /dev/null -w '%{http_code}' "$URL/v1/completions" -H 'X-Request-Timeout: 120s' \
			-d @"$TMP/$BODY.$((i % 256))") || code=000
		echo "$code" >>"$TMP/codes.$1"
	done
}

# cpu_load NAME TOKENS_METRIC: CONCURRENCY closed-loop streams for DURATION
# against the server running as $SERVER; prints NAME's CPU per streamed
# token and sets CPU_PER_TOKEN (µs).
cpu_load() {
	local t0 c0 c1 g0 g1
	g0=$(metric "$2")
	c0=$(cpu_s)
	t0=$(date +%s.%N)
	for c in $(seq "$CONCURRENCY"); do stream_loop "$c" "$DURATION" & done
	wait $(jobs -p | grep -v "^$SERVER\$")
	c1=$(cpu_s)
	g1=$(metric "$2")
	local line
	IFS=$'\t' read -r CPU_PER_TOKEN line < <(python3 - "$1" "$c0" "$c1" "$g0" "$g1" "$t0" "$(date +%s.%N)" <<'PY'
import sys
name = sys.argv[1]
c0, c1, g0, g1, t0, t1 = map(float, sys.argv[2:])
us = (c1 - c0) / (g1 - g0) * 1e6
print(f"{us:.1f}\t{name}: tokens {g1-g0:.0f} in {t1-t0:.1f}s ({(g1-g0)/(t1-t0):.0f}/s); server CPU {c1-c0:.2f}s: {us:.1f} µs per streamed token")
PY
	)
	echo "$line"
	cat "$TMP"/codes.* | sort | uniq -c | sed 's/^/  status /'
	rm -f "$TMP"/codes.*
}

section_cpu() {
	echo "== server CPU per streamed token: $CONCURRENCY closed-loop streams for ${DURATION}s (target <= 20 µs, goal 10)"
	serve --model sim-lm
	cpu_load "infer serve" 'infer_gen_generation_tokens_total{endpoint="v1"}'
	stop_server
}

section_floor() {
	echo "== CPU per streamed token, infer serve vs internal/ssefloor, $ROUNDS pairs in turn ($CONCURRENCY streams, ${DURATION}s each)"
	floor_pairs
}

section_floorcache() {
	echo "== CPU per streamed token with the prefix cache at work, infer serve vs internal/ssefloor, $ROUNDS pairs in turn"
	echo "   ($CONCURRENCY streams, ${DURATION}s each; prompts of 16 shared 128-word prefixes and questions of 16-272 words)"
	BODY=shared floor_pairs --prefix-cache=true
}

# floor_pairs [SERVE_FLAGS...]: ROUNDS pairs in turn of cpu_load on infer
# serve --model sim-lm SERVE_FLAGS and on internal/ssefloor, and their
# ratios; with the prefix cache on, the server's hit rate of each round.
floor_pairs() {
	go build -o "$TMP/ssefloor" ./internal/ssefloor
	local pairs=()
	for r in $(seq "$ROUNDS"); do
		serve --model sim-lm "$@"
		cpu_load "  round $r, infer serve" 'infer_gen_generation_tokens_total{endpoint="v1"}'
		pairs+=("$CPU_PER_TOKEN")
		local q h
		q=$(metric 'infer_gen_prefix_cache_queries_total{endpoint="v1"}')
		h=$(metric 'infer_gen_prefix_cache_hits_total{endpoint="v1"}')
		awk -v q="$q" -v h="$h" 'BEGIN {if (q > 0) printf "  prefix cache: %.0f of %.0f prompt tokens found cached (%.1f %%)\n", h, q, 100 * h / q}'
		stop_server
		port_free "$URL"
		${SERVE_ENV:-} "$TMP/ssefloor" -addr "${URL#http://}" >"$TMP/floor.log" 2>&1 &
		SERVER=$!
		await_ready "$URL" "$SERVER" || { cat "$TMP/floor.log"; exit 1; }
		cpu_load "  round $r, ssefloor" ssefloor_tokens_total
		pairs+=("$CPU_PER_TOKEN")
		stop_server
	done
	python3 - "${pairs[@]}" <<'PY'
import statistics, sys
v = list(map(float, sys.argv[1:]))
r = [a / b for a, b in zip(v[0::2], v[1::2])]
print("infer serve / floor: " + " ".join(f"{x:.2f}" for x in r) + f"  (median {statistics.median(r):.2f}); floor median {statistics.median(v[1::2]):.1f} µs")
PY
}

# hold.py: opens N streams, waits until each got its first event, reports,
# then either reads them to the end or stops reading one (slow), or closes
# one after 3 events (disconnect).
cat >"$TMP/hold.py" <<'PY'
import asyncio, json, socket, sys, time
host, port, n, mode, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
body = json.dumps({"prompt": "hold this stream open", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
req = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
       f"X-Request-Timeout: 600s\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
async def one(i, started, release):
    sock = None
    if mode == "slow" and i == 0:
        sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); sock.connect((host, port)); sock.setblocking(False)
        r, w = await asyncio.open_connection(sock=sock, limit=1024)
    else:
        r, w = await asyncio.open_connection(host, port, limit=1 << 16)
    w.write(req); await w.drain()
    status = (await r.readline()).split(b" ")[1:2]
    if status != [b"200"]:
        w.close(); return ("refused", 0)
    events = 0
    while True:
        line = await r.readline()
        if not line: break
        if line.startswith(b"data: "):
            events += 1
            if events == 1: started.append(i)
            if line.startswith(b"data: [DONE]"): break
            if mode == "slow" and i == 0 and events == 1:
                await release.wait(); w.close(); return ("slow", events)
            if mode == "disconnect" and i == 0 and events == 3:
                w.close(); return ("left", events)
    w.close()
    return ("done", events)
async def main():
    started, release = [], asyncio.Event()
    tasks = [asyncio.create_task(one(i, started, release)) for i in range(n)]
    t0 = time.time()
    while len(started) < n and time.time() - t0 < 60 and not all(t.done() for t in tasks): await asyncio.sleep(0.05)
    print(f"streaming {len(started)} of {n} after {time.time()-t0:.1f}s", flush=True)
    sys.stdout.write("HELD\n"); sys.stdout.flush()
    if mode == "slow":
        others = [t for t in tasks[1:]]
        res = await asyncio.gather(*others)
        print(f"other streams: {sum(1 for r in res if r[0]=='done')} of {len(others)} done, {sum(r[1] for r in res)} events, while one client read nothing", flush=True)
        sys.stdout.write("OTHERS\n"); sys.stdout.flush()
        await asyncio.sleep(float(sys.argv[6]) if len(sys.argv) > 6 else 15)
        release.set()
    res = await asyncio.gather(*tasks)
    print("results:", {k: sum(1 for r in res if r[0] == k) for k in ("done", "left", "slow", "refused")}, flush=True)
asyncio.run(main())
PY

section_streams() {
	echo "== $STREAMS concurrent streams held"
	serve --model sim-lm --max-seqs "$STREAMS" --max-batched-tokens 4096 --kv-tokens 1048576 --queue-cap "$STREAMS" --timeout 10m
	local before
	before=$(rss_mib)
	python3 "$TMP/hold.py" 127.0.0.1 "$PORT" "$STREAMS" hold 400 >"$TMP/hold.out" &
	local py=$!
	for _ in $(seq 1200); do grep -q HELD "$TMP/hold.out" 2>/dev/null && break; sleep 0.1; done
	grep streaming "$TMP/hold.out" || true
	echo "server RSS: $(rss_mib) MiB with the streams held ($before MiB idle); running $(metric 'infer_gen_num_requests_running{endpoint="v1"}'), target < 300 MiB"
	kill "$py" 2>/dev/null; wait "$py" 2>/dev/null || true
}

section_slow() {
	echo "== a client that stops reading (its receive buffer 4 KiB) among 8 that read"
	echo "   (the kernel's socket buffers absorb up to tcp_wmem's max, $(awk '{print $3}' /proc/sys/net/ipv4/tcp_wmem) bytes, on the server: a sim-lm answer"
	echo "   of at most 4,096 tokens fits, so the stalled stream ends there; past them the write deadline or the stream buffer cuts it,"
	echo "   see TestSlowReaderIsCutWithoutStallingOthers in server/openai)"
	serve --model sim-lm --timeout 10m
	python3 "$TMP/hold.py" 127.0.0.1 "$PORT" 9 slow 4000 20 >"$TMP/slow.out" &
	local py=$!
	for _ in $(seq 1200); do grep -q OTHERS "$TMP/slow.out" 2>/dev/null && break; sleep 0.1; done
	grep "other streams" "$TMP/slow.out" || true
	echo "while the slow client still reads nothing: running $(metric 'infer_gen_num_requests_running{endpoint="v1"}')," \
		"cut $(($(metric 'infer_gen_requests_aborted_total{endpoint="v1",reason="slow_reader"}') + $(metric 'infer_gen_requests_aborted_total{endpoint="v1",reason="write_failed"}')))," \
		"finished $(metric 'infer_gen_request_success_total{endpoint="v1",finished_reason="length"}'), server RSS $(rss_mib) MiB"
	wait "$py" 2>/dev/null || true
}

section_disconnect() {
	echo "== a client that leaves mid-stream"
	serve --model sim-lm --sim-step 20ms
	python3 "$TMP/hold.py" 127.0.0.1 "$PORT" 2 disconnect 1000 >"$TMP/disc.out" &
	local py=$! t0
	for _ in $(seq 100); do [ "$(metric 'infer_gen_requests_aborted_total{endpoint="v1",reason="client_gone"}')" = 1 ] && break; sleep 0.01; done
	t0=$(date +%s%N)
	echo "after the disconnect: running $(metric 'infer_gen_num_requests_running{endpoint="v1"}') (was 2)," \
		"aborted client_gone $(metric 'infer_gen_requests_aborted_total{endpoint="v1",reason="client_gone"}')," \
		"KV usage $(metric 'infer_gen_kv_cache_usage_perc{endpoint="v1"}')"
	kill "$py" 2>/dev/null; wait "$py" 2>/dev/null || true
}

section_badinput() {
	echo "== bad input while a valid load runs"
	serve --model sim-lm
	for c in $(seq 8); do stream_loop "$c" 10 & done
	sleep 1
	bad() { # bad NAME WANT_STATUS CURL_ARGS...
		local name=$1 want=$2
		shift 2
		got=$(curl -s -o "$TMP/bad.out" -w '%{http_code}' "$URL/v1/completions" "$@")
		printf '  %-22s %s (want %s) %s\n' "$name" "$got" "$want" "$(head -c 160 "$TMP/bad.out")"
	}
	bad "missing prompt" 422 -d '{"model":"sim-lm"}'
	bad "negative max_tokens" 422 -d '{"prompt":"x","max_tokens":-1}'
	bad "unknown model" 404 -d '{"model":"gpt-4","prompt":"x"}'
	bad "non-JSON" 400 -d 'hello'
	head -c 2000000 /dev/zero | tr '\0' a >"$TMP/big"
	bad "oversize body" 413 --data-binary @"$TMP/big"
	bad "prompt over context" 413 -d "{\"prompt\":\"$(python3 -c 'print("word " * 5000)')\"}"
	bad "n=2" 422 -d '{"prompt":"x","n":2}'
	wait $(jobs -p | grep -v "^$SERVER\$")
	echo "valid load statuses:"
	cat "$TMP"/codes.* | sort | uniq -c | sed 's/^/  status /'
	rm -f "$TMP"/codes.*
}

sections=${*:-cpu floor floorcache streams slow disconnect badinput}
for s in $sections; do "section_$s"; done
