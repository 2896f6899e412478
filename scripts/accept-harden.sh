#!/usr/bin/env bash
# Reruns the acceptance figures of the hardening issues (13, 27) against real
# processes on 127.0.0.1, each section one command:
#   drain     10 SIGTERM drains under a 300 req/s keep-alive load: EOF/resets
#   conns     20,000 idle keep-alive connections from one host while /healthz
#             is timed
#   deadline  a 200 ms model at 200 req/s with X-Request-Timeout: 250ms:
#             429 at once, nothing computed for refused requests
#   admin     PATCHes with huge values (422), and a cancelled PATCH leaving
#             GET truthful
#   naive     bert-mini, 256 items of ~700 words on /naive vs /batched: RSS
#   prompts   96 clients sending 1 MB prompts beside 20 timed streams, A B A B:
#             413s, server CPU each, RSS, the streams' pace
#   drainstreams  200 streams, SIGTERM after 2 s, --drain-timeout 5s: how
#             each ended (0 silent closes), the exit code, the log
#   cold      600 requests at once to /naive/v1 of a fresh server, then
#             again: 504s (want ≤ 5 %)
#   silent    sockets that never send a request (4,096 against sim-lm; 512
#             under ulimit -n 1024 against sim), reopened as soon as the
#             server closes them, while /healthz and a real request are
#             tried 20 times each: both must succeed 19 of 20; the
#             attacker's and the server's CPU over the same time
#   hostile   the bench against six hostile servers (never-ending stream,
#             1 byte/s drip, POST black hole, event over the bound, HTML,
#             cut mid-stream): each summary's cut-off count or causes line
# Every load is bounded in time. Usage: scripts/accept-harden.sh [section...]
# (default: all). PORT (default 20080) sets the port; BIN another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
# BIN=path runs another build (e.g. the one before the fixes) instead.
if [[ -z ${BIN:-} ]]; then make -s build; BIN=$PWD/bin/infer; fi
PORT=${PORT:-20080}
URL=http://127.0.0.1:$PORT
TMP=$(mktemp -d -t infer-harden.XXXXXX)
trap 'stop_server; rm -rf "$TMP"' EXIT
vegeta_install

SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(drain conns deadline admin naive silent prompts drainstreams cold hostile); fi

if section drain; then
	echo "== drain: ${DRAIN_RUNS:-10} × SIGTERM at 1.5 s into a 300 req/s keep-alive load (sim 77ms + 1.16ms)"
	echo -n 'Paris is the [MASK] of France.' >"$TMP/body"
	printf 'POST %s\nContent-Type: text/plain\n@%s\n' "$URL/batched" "$TMP/body" >"$TMP/targets"
	total_bad=0
	for run in $(seq 1 ${DRAIN_RUNS:-10}); do
		serve --model sim --sim-fixed 77ms --sim-per-item 1.16ms --drain-timeout 10s
		$VEGETA attack -targets "$TMP/targets" -rate 300/s -duration 3s -timeout 10s -keepalive=true >"$TMP/drain.bin" &
		ATTACK=$!
		sleep 1.5
		drain_server
		wait "$ATTACK"
		line=$($VEGETA encode --to csv <"$TMP/drain.bin" | python3 -c '
import csv, sys, collections
n, seen = collections.Counter(), {}
for row in csv.reader(sys.stdin):
    code, err = row[1], row[5]
    if code != "0": kind = code  # an answer (503: draining)
    elif "connection refused" in err: kind = "refused"
    elif "EOF" in err or "reset" in err or "broken pipe" in err: kind = "EOF/reset"
    else: kind = "other error"
    n[kind] += 1
    if kind in ("EOF/reset", "other error"): seen.setdefault(kind, err)
print(" ".join(f"{k}:{v}" for k, v in sorted(n.items())), *(f"[{e}]" for e in seen.values()), n["EOF/reset"] + n["other error"])')
		bad=${line##* }
		total_bad=$((total_bad + bad))
		printf '  run %2d: exit %d after %ss; %s\n' "$run" "$DRAIN_EXIT" "$DRAIN_SECONDS" "${line% *}"
	done
	echo "drain: $total_bad EOF/reset/other errors over ${DRAIN_RUNS:-10} runs (want 0; 'refused' = new connections after the listener closed, nothing sent)"
fi

if section conns; then
	echo "== conns: 20,000 idle keep-alive connections from this host (2 processes × 10,000), /healthz timed"
	serve --model sim --sim-fixed 4ms --sim-per-item 0.1ms
	cat >"$TMP/hold.py" <<'PY'
import socket, sys, time
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks, failed = [], 0
for i in range(n):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(4096)
        socks.append(s)
    except OSError:
        failed += 1
print(f"opened {len(socks)}, failed {failed}", flush=True)
time.sleep(hold)
alive = 0
for s in socks:
    s.setblocking(False)
    try:
        alive += s.recv(1) != b""   # b"" = closed by the server
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(f"still open after {hold:.0f}s: {alive}", flush=True)
PY
	python3 "$TMP/hold.py" "$PORT" 10000 20 >"$TMP/hold1.out" &
	H1=$!
	python3 "$TMP/hold.py" "$PORT" 10000 20 >"$TMP/hold2.out" &
	H2=$!
	: >"$TMP/healthz"
	for _ in $(seq 1 60); do
		curl -s -o /dev/null -w '%{time_total}\n' -m 5 "$URL/healthz" >>"$TMP/healthz" || echo 5 >>"$TMP/healthz"
		sleep 0.25
	done
	wait "$H1" "$H2"
	sed 's/^/  client: /' "$TMP/hold1.out" "$TMP/hold2.out"
	sort -n "$TMP/healthz" | awk '{a[NR]=$1} END {printf "  /healthz while the connections were opened and held: %d probes, p50 %.1f ms, max %.1f ms\n", NR, a[int(NR/2)+1]*1000, a[NR]*1000}'
	echo "  server: open $(metric infer_connections_open), idle closed at the cap $(metric 'infer_connections_closed_total{reason="idle_evicted"}'), refused $(metric 'infer_connections_closed_total{reason="over_cap"}'), accept errors $(metric infer_accept_errors_total)"
	stop_server
fi

if section deadline; then
	echo "== deadline: sim 200ms, 200 req/s for 5 s, X-Request-Timeout: 250ms"
	serve --model sim --sim-fixed 200ms --sim-per-item 0
	echo -n 'Paris is the [MASK] of France.' >"$TMP/body"
	printf 'POST %s\nContent-Type: text/plain\nX-Request-Timeout: 250ms\n@%s\n' "$URL/batched" "$TMP/body" >"$TMP/targets"
	items0=$(metric 'infer_items_total{endpoint="batched"}')
	$VEGETA attack -targets "$TMP/targets" -rate 200/s -duration 5s -timeout 5s >"$TMP/deadline.bin"
	sleep 0.5
	items1=$(metric 'infer_items_total{endpoint="batched"}')
	statuses "$TMP/deadline.bin" | tee "$TMP/statuses"
	ok=$(awk '$2 == "200:" {print $3}' "$TMP/statuses")
	echo "  items computed: $(awk -v a="$items0" -v b="$items1" 'BEGIN{print b-a}') (want = the 200s: ${ok:-0}); dropped before compute: $(metric 'infer_dropped_items_total{endpoint="batched"}')"
	stop_server
fi

if section admin; then
	echo "== admin: huge values, and a PATCH cancelled after 0.3 s (3 workers, busy 1 s model)"
	serve --model sim --sim-fixed 1s --sim-per-item 0 --workers 3 --batch 1 --policy immediate --admin-token T
	patch() { curl -s -o "$TMP/patch.out" -w '%{http_code}' -X PATCH -H 'Authorization: Bearer T' -d "$1" "${@:2}" "$URL/admin/batching"; }
	for body in '{"batch": 9223372036854775807}' '{"workers": 9223372036854775807}' '{"workers": 1000}' '{"max_latency": "1000h"}'; do
		printf '  PATCH %-34s → %s %s\n' "$body" "$(patch "$body")" "$(head -c 120 "$TMP/patch.out")"
	done
	busy=()
	for i in 1 2 3; do curl -s -o /dev/null -d "busy $i" "$URL/batched" & busy+=($!); done
	sleep 0.2
	patch '{"workers": 1}' --max-time 0.3 >/dev/null || true
	echo "  GET after the cancelled PATCH to 1: $(curl -s -H 'Authorization: Bearer T' "$URL/admin/batching")"
	wait "${busy[@]}"
	for n in 3 1 2; do echo "  PATCH workers $n → $(patch "{\"workers\": $n}") $(cat "$TMP/patch.out")"; done # new workers warm up: 3 s each
	stop_server
fi

if section naive; then
	echo "== naive: bert-mini, one request of 256 items of ~700 words, /naive vs /batched (RSS)"
	python3 -c '
import json, random
random.seed(1)
words = "the of and to in is was for on that with as by at from his her an which are".split()
items = ["[MASK] " + " ".join(random.choice(words) for _ in range(699)) for _ in range(256)]
print(json.dumps({"inputs": items}))' >"$TMP/big.json"
	for ep in naive batched; do
		serve --max-body 8MiB
		before=$(rss_kib VmRSS)
		( peak=0; while kill -0 "$SERVER" 2>/dev/null; do r=$(rss_kib VmRSS 2>/dev/null || echo 0); ((r > peak)) && peak=$r; echo "$peak" >"$TMP/peak"; sleep 0.1; done ) &
		MON=$!
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 300 -H 'Content-Type: application/json' --data-binary @"$TMP/big.json" "$URL/$ep")
		sleep 0.3
		kill "$MON" 2>/dev/null || true; wait "$MON" 2>/dev/null || true
		echo "  /$ep: status $code; RSS before $((before / 1024)) MiB, peak $(($(cat "$TMP/peak") / 1024)) MiB"
		stop_server
	done
fi

if section silent; then
	cat >"$TMP/silent.py" <<'PY'
# Holds n sockets to 127.0.0.1:port that never send a byte (half of them
# send half a request header), reopening each one the server closes at
# once, for secs seconds; prints the reopen count and its own CPU seconds.
import os, selectors, socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sel = selectors.DefaultSelector()
opened = 0
def open_one(i):
    global opened
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    if i % 2:
        try: s.send(b"GET /healthz HTTP/1.1\r\n")
        except OSError: pass
    sel.register(s, selectors.EVENT_READ, i)
    opened += 1
for i in range(n):
    open_one(i)
print("holding", flush=True)
end = time.time() + secs
while time.time() < end:
    for key, _ in sel.select(timeout=0.2):
        s = key.fileobj
        try: data = s.recv(4096)
        except OSError: data = b""
        if not data:  # closed by the server: reopen at once
            sel.unregister(s); s.close(); open_one(key.data)
t = os.times()
print(f"sockets {n}, opened {opened} in {secs:.0f}s ({(opened - n) / secs:.0f} reopens/s), attacker CPU {t.user + t.system:.2f}s", flush=True)
PY
	# silent_run N SECS MODEL... : hold N silent sockets against a server
	# started with the rest of the arguments; 20 × /healthz and 20 × a real
	# request from another client; CPU of both sides.
	silent_run() {
		local n=$1 secs=$2 ok_h=0 ok_r=0 c0 c1 body path
		shift 2
		serve "$@"
		if [[ " $* " == *" sim-lm "* ]]; then
			path=/v1/completions body='{"prompt":"Once upon a time","max_tokens":8}'
		else
			path=/batched body='{"inputs":["Paris is the [MASK] of France."]}'
		fi
		c0=$(cpu_ticks)
		(ulimit -n 20000; exec python3 "$TMP/silent.py" "$PORT" "$n" "$secs") >"$TMP/silent.out" &
		local H=$!
		until grep -q holding "$TMP/silent.out" 2>/dev/null; do sleep 0.1; done
		sleep 2
		for _ in $(seq 1 20); do
			[[ $(curl -s -o /dev/null -w '%{http_code}' -m 3 "$URL/healthz") == 200 ]] && ok_h=$((ok_h + 1))
			[[ $(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Content-Type: application/json' -d "$body" "$URL$path") == 200 ]] && ok_r=$((ok_r + 1))
			sleep 0.3
		done
		wait "$H"
		c1=$(cpu_ticks)
		echo "  $(cat "$TMP/silent.out" | tail -1), server CPU $(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2fs", t / hz}')"
		echo "  /healthz $ok_h/20 ok, POST $path $ok_r/20 ok (want ≥ 19 each); evicted new $(metric 'infer_connections_closed_total{reason="new_evicted"}'), refused $(metric 'infer_connections_closed_total{reason="over_cap"}')"
		stop_server
	}
	echo "== silent: 4,096 sockets that never send a request, against sim-lm"
	silent_run 4096 "${SILENT_SECS:-15}" --model sim-lm
	echo "== silent: 512 such sockets, the server under ulimit -n 1024 (sim)"
	SERVE_ENV="prlimit --nofile=1024:1024" silent_run 512 "${SILENT_SECS:-15}" --model sim
fi

if section prompts; then
	echo "== prompts: 96 concurrent 1 MB prompts against sim-lm (each 413), 20 streams timed beside, A B A B"
	cat >"$TMP/prompts.py" <<'PY'
# mode streams|both: 20 streams of 200 tokens (ignore_eos), their mean
# tokens/s; with both, 96 clients post 1 MB prompts meanwhile, each
# pausing PAUSE seconds after each answer (0: a tight loop).
import http.client, json, sys, threading, time
port, mode, pause = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
big = json.dumps({"prompt": "word " * ((1 << 20) // 5), "max_tokens": 4}).encode()
codes, stop = {}, threading.Event()
def attack():
    while not stop.is_set():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request("POST", "/v1/completions", big, {"Content-Type": "application/json"})
            r = c.getresponse(); r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
        except OSError as e:
            codes[type(e).__name__] = codes.get(type(e).__name__, 0) + 1
        c.close()
        stop.wait(pause)
paces = []
def stream():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    n, first = 0, None
    for line in r:
        if line.startswith(b"data: {"):
            n += 1
            if first is None: first = time.time()
    if n > 1: paces.append((n - 1) / (time.time() - first))
attackers = [threading.Thread(target=attack) for _ in range(96 if mode == "both" else 0)]
for a in attackers: a.start()
time.sleep(1 if attackers else 0)
ss = [threading.Thread(target=stream) for _ in range(20)]
for s in ss: s.start()
for s in ss: s.join()
stop.set()
for a in attackers: a.join()
print(f"{mode}: {len(paces)} streams, mean {sum(paces)/max(1,len(paces)):.1f} tokens/s; 1 MB prompts: {codes}", flush=True)
PY
	serve --model sim-lm
	for run in 1 2; do
		for mode in streams both; do
			c0=$(cpu_ticks); n0=$(metric 'infer_gen_requests_total{code="413",endpoint="v1"}')
			python3 "$TMP/prompts.py" "$PORT" "$mode" "${PROMPT_PAUSE:-1}" | sed 's/^/  /'
			c1=$(cpu_ticks); n1=$(metric 'infer_gen_requests_total{code="413",endpoint="v1"}')
			echo "    server CPU $(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}')s, 413s $(awk -v a="$n0" -v b="$n1" 'BEGIN {print b - a}'), RSS $(($(rss_kib VmRSS) / 1024)) MiB, peak $(($(rss_kib VmHWM) / 1024)) MiB"
		done
	done
	stop_server
fi

if section drainstreams; then
	echo "== drainstreams: 200 streams on sim-lm, SIGTERM after 2 s, --drain-timeout 5s: every one answered"
	cat >"$TMP/streams.py" <<'PY'
# 200 streams at once (max_tokens 2000, ignore_eos); how each ended:
# done ([DONE] after tokens), error+done (an error event then [DONE]),
# status NNN (an HTTP error), silent (closed with neither).
import http.client, json, sys, threading, collections
port = int(sys.argv[1])
ends, errs, sent = collections.Counter(), collections.Counter(), [0]
lock = threading.Lock()
def one():
    kind = "silent"
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True, "stream": True})
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        with lock:
            sent[0] += 1
            if sent[0] == 200: print("sent", flush=True)
        r = c.getresponse()
        if r.status != 200:
            kind = f"status {r.status}"; r.read()
        else:
            err = False
            for line in r:
                if line.startswith(b'data: {"error"'): err = True
                if line.startswith(b"data: [DONE]"):
                    kind = "error+done" if err else "done"
    except Exception as e:
        kind = "silent"
        with lock: errs[type(e).__name__] += 1
    with lock: ends[kind] += 1
ts = [threading.Thread(target=one) for _ in range(200)]
for t in ts: t.start()
for t in ts: t.join()
print("  ends:", dict(ends), "- silent closes:", ends["silent"], "(want 0)", dict(errs) if errs else "")
PY
	serve --model sim-lm --drain-timeout 5s --queue-cap 1000
	python3 "$TMP/streams.py" "$PORT" >"$TMP/streams.out" &
	P=$!
	until grep -q sent "$TMP/streams.out"; do sleep 0.05; done
	sleep 2
	drain_server
	wait "$P"
	grep -v sent "$TMP/streams.out"
	echo "  exit $DRAIN_EXIT after ${DRAIN_SECONDS}s (5: the drain timed out, documented); log:"
	grep -i drain "$TMP/serve.log" | sed 's/^/    /'
fi

if section cold; then
	echo "== cold: 600 requests at once to /naive/v1/completions of a fresh sim-lm server, then again"
	cat >"$TMP/burst.py" <<'PY'
import http.client, json, sys, threading, collections
port, path, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
codes, lock = collections.Counter(), threading.Lock()
body = json.dumps({"prompt": "Once upon a time"})
def one():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read(); k = r.status
    except Exception as e:
        k = type(e).__name__
    with lock: codes[k] += 1
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(dict(codes), f"504s: {100 * codes[504] / n:.1f} % (want ≤ 5 %)", flush=True)
PY
	serve --model sim-lm ${COLD_ARGS:-}
	for burst in cold warm; do
		echo "  $burst: $(python3 "$TMP/burst.py" "$PORT" /naive/v1/completions 600)"
	done
	stop_server
fi

if section hostile; then
	echo "== hostile: the bench's summary against six hostile servers (TestRunLLMHostile)"
	go test -count=1 -v -run 'TestRunLLMHostile$' ./loadgen/ | grep -E '^=== (CONT|NAME)|^    --- |cut off at the drain|causes:|^(ok|FAIL)'
fi
