#!/usr/bin/env bash
# Acceptance measurements of infer route (docs/route.md quotes them), against
# real processes on 127.0.0.1. Usage: scripts/accept-route.sh [section...]
# Sections (default: all but llmd):
#   overhead  2 sim encoder replicas; at 1,000 req/s of small bodies (vegeta, open loop),
#             the latency p50/p99 direct, through infer route and through
#             HAProxy 2.6 (apt-get install haproxy), and the CPU per request
#             of each front. Each of ROUNDS rounds (5) runs infer route and
#             HAProxy (their order swapped every other round) for LOAD_SECONDS
#             (10) each. MIX=1 (the default): each run is one vegeta attack at
#             2,000 req/s whose every other request goes to the front and the
#             rest to the two replicas in turn (direct), so that the front's
#             1,000 req/s and direct's 1,000 req/s meet the same moments of the
#             machine; the replicas carry 2,000 req/s. MIX=0: direct runs
#             alone, a third run in each round (the order rotated), vegeta
#             sending the same 1,000 req/s to the two replicas in turn
#             (DIRECT=one: one replica at 500 req/s, its share). A front's
#             added latency in a round is its p50 (p99) less direct's in the
#             same run (MIX=1) or round (MIX=0); the summary is the median of
#             those differences over the rounds, with their range, and the
#             median CPU per request. PIN=1 (default 0) runs the front alone on
#             the last CPU (taskset -c) and vegeta and the replicas on the
#             others, as a front on its own host would; a front on one CPU runs
#             one thread (Go sets GOMAXPROCS, HAProxy nbthread, to the CPUs the
#             process may use). ROUTE_ENV prefixes the router's command (e.g.
#             "env GOMAXPROCS=1").
#   hash      10,000 requests hashed on X-Routing-Key over 2 replicas: the
#             share that stayed on its key's replica, then the keys moved
#             by removing one (go test, INFER_ROUTE_ACCEPT=1)
#   streams   1,000 streams through an infer route process beside a slow
#             reader: the router's RSS and the worst gap between events
#   faults    kill -9 and SIGSTOP of a replica under load
#   llmd      the llm-d experiment in miniature: 4 sim-lm replicas
#             (--max-seqs 32 --kv-tokens 16384), 16 tenants with 3,072-token
#             contexts, a closed loop of 128 streams per policy
#   bench     the same through infer bench (scenarios/route-llmd*.yaml):
#             every policy closed loop, then Poisson, then HAProxy's
#             roundrobin, leastconn and consistent hash on the tenant over
#             4 replicas (BENCH_DURATION, default the scenarios' 30s)
# Every load is bounded in time. Ports: 18800-18815 (ROUTE_PORT_BASE).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
make -s build
BIN=bin/infer
P=${ROUTE_PORT_BASE:-18800}
ROUTER=http://127.0.0.1:$P
HAPROXY=http://127.0.0.1:$((P + 10))
TMP=$(mktemp -d -t infer-route.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
ROUNDS=${ROUNDS:-5}

SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then SECTIONS=(overhead hash streams faults); fi

# start NAME URL CMD...: run CMD in the background, its log in $TMP/NAME.log,
# and wait until URL/readyz answers.
start() {
	local name=$1 url=$2
	shift 2
	"$@" >"$TMP/$name.log" 2>&1 &
	PIDS+=($!)
	eval "PID_$name=$!"
	await_ready "$url" $! 60 || { echo "$name did not become ready:"; cat "$TMP/$name.log"; exit 1; }
}

# stop NAME: stop the process start NAME started.
stop() {
	local pid
	pid=$(eval echo "\$PID_$1")
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# haproxy_cfg BALANCE: a HAProxy config over the two replicas.
haproxy_cfg() {
	cat <<CFG
global
	maxconn 8000
defaults
	mode http
	timeout connect 2s
	timeout client 60s
	timeout server 60s
	option http-keep-alive
frontend f
	bind 127.0.0.1:$((P + 10))
	default_backend b
	monitor-uri /readyz
backend b
	$1
	http-reuse always
	server r1 127.0.0.1:$((P + 1)) check inter 500ms
	server r2 127.0.0.1:$((P + 2)) check inter 500ms
CFG
}

# load URL[,URL...] RATE: vegeta, open loop, for LOAD_SECONDS (default 10)
# at RATE req/s, small bodies to /batched, each with a routing key among
# 1,000, the URLs in turn; prints the latency p50 and p99 (also into $P50
# and $P99, in ms) and the requests answered 200 (into $N).
load() {
	local url=$1 rate=$2
	python3 - "$url" "$TMP/body" >"$TMP/targets" <<'PY'
import sys
urls, body = sys.argv[1].split(","), sys.argv[2]
for i in range(1000):
    print(f"POST {urls[i % len(urls)]}/batched\nX-Routing-Key: tenant-{i}\nContent-Type: text/plain\n@{body}\n")
PY
	${LOAD_CPUS:+taskset -c "$LOAD_CPUS"} "$VEGETA" attack -rate="$rate" -duration="${LOAD_SECONDS:-10}s" -targets="$TMP/targets" >"$TMP/results.bin"
	local rest
	read -r N P50 P99 rest < <("$VEGETA" report -type=json <"$TMP/results.bin" | python3 -c 'import json,sys; r=json.load(sys.stdin); l=r["latencies"]
print(r["status_codes"].get("200", 0), "%.3f %.3f" % (l["50th"]/1e6, l["99th"]/1e6), "%.0f req/s  codes %s" % (r["throughput"], r["status_codes"]))')
	printf 'p50 %.2f ms  p99 %.2f ms  %s\n' "$P50" "$P99" "$rest"
}

# per_request T0 T1: the CPU ticks T1-T0 of a process, in µs per request
# answered ($N).
per_request() {
	awk -v t=$(($2 - $1)) -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN{printf "%.1f", t/hz*1e6/n}'
}

# front NAME PID URL ROUND: load URL at 1,000 req/s; print its latencies and
# the CPU the front PID spent per request answered (none for PID 0: direct),
# and add them to $TMP/rounds as NAME ROUND P50 P99 CPU.
front() {
	local t0 t1 cpu=0
	[[ $2 == 0 ]] || t0=$(cpu_ticks "$2")
	load "$3" 1000 >"$TMP/out" # not in a subshell: load sets N, P50 and P99
	if [[ $2 != 0 ]]; then
		t1=$(cpu_ticks "$2")
		cpu=$(per_request "$t0" "$t1")
		echo "  $1:  $(cat "$TMP/out")  CPU $cpu us/request"
	else
		echo "  $1:  $(cat "$TMP/out")"
	fi
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$4" "$P50" "$P99" "$cpu" >>"$TMP/rounds"
}

# mixed NAME PID URL ROUND: one vegeta run at 2,000 req/s that sends every
# other request to URL (the front PID) and the rest to the two replicas in
# turn, so that the front's 1,000 req/s and direct's 1,000 req/s share the
# same moments of the machine; print both's latencies and the front's CPU
# per request answered, and add them to $TMP/rounds (round ROUND/NAME).
mixed() {
	local t0 t1 cpu
	t0=$(cpu_ticks "$2")
	load "http://127.0.0.1:$((P + 1)),$3,http://127.0.0.1:$((P + 2)),$3" 2000 >/dev/null
	t1=$(cpu_ticks "$2")
	read -r N P50 P99 D50 D99 < <("$VEGETA" encode --to csv <"$TMP/results.bin" | python3 -c '
import csv, sys
front = sys.argv[1] + "/"
lat = {True: [], False: []}
ok = 0
for row in csv.reader(sys.stdin):
    mine = row[10].startswith(front)
    lat[mine].append(int(row[2]) / 1e6)
    ok += mine and row[1] == "200"
q = lambda ls, p: sorted(ls)[min(len(ls) - 1, int(p * len(ls)))]
print(ok, "%.3f %.3f %.3f %.3f" % (q(lat[True], .5), q(lat[True], .99), q(lat[False], .5), q(lat[False], .99)))' "$3")
	cpu=$(per_request "$t0" "$t1")
	echo "  $1:  p50 $P50 ms  p99 $P99 ms ($N answered 200), beside direct:  p50 $D50 ms  p99 $D99 ms  CPU $cpu us/request"
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$4/$1" "$P50" "$P99" "$cpu" "direct, both replicas in turn" "$4/$1" "$D50" "$D99" 0 >>"$TMP/rounds"
}

# added: $TMP/rounds summed up per front: the medians over the rounds of its
# p50 and p99 less direct's in the same round (with their range), and of
# its CPU per request.
added() {
	python3 - "$TMP/rounds" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(dict)  # round -> front -> (p50, p99, cpu)
fronts = []
for line in open(sys.argv[1]):
    name, rnd, p50, p99, cpu = line.rstrip("\n").split("\t")
    by[rnd][name] = (float(p50), float(p99), float(cpu))
    if name not in fronts:
        fronts.append(name)
direct = next(f for f in fronts if f.startswith("direct"))
d = [by[r][direct] for r in by if direct in by[r]]
print("  %s: p50 %.2f ms, p99 %.2f ms (%.2f to %.2f): medians over %d rounds" % (direct,
    statistics.median(x[0] for x in d), statistics.median(x[1] for x in d), min(x[1] for x in d), max(x[1] for x in d), len(d)))
for f in fronts:
    if f == direct:
        continue
    rs = [r for r in by if f in by[r] and direct in by[r]]
    a50 = [by[r][f][0] - by[r][direct][0] for r in rs]
    a99 = [by[r][f][1] - by[r][direct][1] for r in rs]
    cpu = [by[r][f][2] for r in rs]
    print("  %s: added p50 %.2f ms (%.2f to %.2f), added p99 %.2f ms (%.2f to %.2f), CPU %.0f us/request (%.0f to %.0f): medians over %d rounds" % (
        f, statistics.median(a50), min(a50), max(a50), statistics.median(a99), min(a99), max(a99),
        statistics.median(cpu), min(cpu), max(cpu), len(cpu)))
PY
}

if section overhead; then
	vegeta_install
	echo -n 'Paris is the [MASK] of France.' >"$TMP/body"
	command -v haproxy >/dev/null || { echo "haproxy missing: apt-get install -y haproxy"; exit 1; }
	FRONT_CPU= LOAD_CPUS=
	ncpu=$(nproc)
	if [[ ${PIN:-0} == 1 && $ncpu -ge 2 ]]; then
		FRONT_CPU=$((ncpu - 1)) LOAD_CPUS=0-$((ncpu - 2))
	fi
	where="unpinned"
	[[ -z $FRONT_CPU ]] || where="the front on CPU $FRONT_CPU, vegeta and the replicas on CPUs $LOAD_CPUS"
	mode="direct beside each front in one attack"
	[[ ${MIX:-1} == 1 ]] || mode="direct, infer route and HAProxy in turn"
	echo "== overhead: 2 replicas of sim 1ms + 0.01ms/item; 1,000 req/s for ${LOAD_SECONDS:-10} s each, $ROUNDS rounds, $mode, $where${ROUTE_ENV:+, router under $ROUTE_ENV}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
	for i in 1 2; do
		start "r$i" "http://127.0.0.1:$((P + i))" ${LOAD_CPUS:+taskset -c "$LOAD_CPUS"} "$BIN" serve --model sim \
			--sim-fixed 1ms --sim-per-item 0.01ms --max-latency 2ms --addr "127.0.0.1:$((P + i))" --log-level warn
	done
	for pair in "round-robin|balance roundrobin" "least-request|balance leastconn" "hash|balance hdr(X-Routing-Key)
	hash-type consistent"; do
		policy=${pair%%|*}
		bal=${pair#*|}
		haproxy_cfg "$bal" >"$TMP/haproxy.cfg"
		start router "$ROUTER" ${FRONT_CPU:+taskset -c "$FRONT_CPU"} ${ROUTE_ENV:-} "$BIN" route --addr "127.0.0.1:$P" \
			--policy "$policy" --log-level warn --upstream "http://127.0.0.1:$((P + 1)),http://127.0.0.1:$((P + 2))"
		start haproxy "$HAPROXY" ${FRONT_CPU:+taskset -c "$FRONT_CPU"} haproxy -db -f "$TMP/haproxy.cfg"
		: >"$TMP/rounds"
		echo " -- infer route --policy $policy against haproxy ${bal//$'\n\t'/ }"
		for r in $(seq "$ROUNDS"); do
			if [[ ${MIX:-1} == 1 ]]; then
				if ((r % 2)); then
					mixed "infer route --policy $policy" "$PID_router" "$ROUTER" "$r"
					mixed "haproxy ${bal//$'\n\t'/ }" "$PID_haproxy" "$HAPROXY" "$r"
				else
					mixed "haproxy ${bal//$'\n\t'/ }" "$PID_haproxy" "$HAPROXY" "$r"
					mixed "infer route --policy $policy" "$PID_router" "$ROUTER" "$r"
				fi
				continue
			fi
			runs=(direct route haproxy)
			for k in 0 1 2; do
				case ${runs[$(((k + r) % 3))]} in
				direct)
					if [[ ${DIRECT:-both} == one ]]; then
						front "direct, one replica at 500 req/s" 0 "http://127.0.0.1:$((P + 1))" "$r"
					else
						front "direct, both replicas in turn" 0 "http://127.0.0.1:$((P + 1)),http://127.0.0.1:$((P + 2))" "$r"
					fi
					;;
				route) front "infer route --policy $policy" "$PID_router" "$ROUTER" "$r" ;;
				haproxy) front "haproxy ${bal//$'\n\t'/ }" "$PID_haproxy" "$HAPROXY" "$r" ;;
				esac
			done
		done
		added
		echo "  load average $(cut -d' ' -f1-3 /proc/loadavg)"
		stop router
		stop haproxy
	done
	stop r1
	stop r2
fi

if section hash; then
	echo "== hash: 10,000 requests on 1,000 keys over 2 sim replicas, then one removed"
	accept_tests ./cmd INFER_ROUTE_ACCEPT 300s TestAcceptRouteHash
fi

if section streams; then
	echo "== streams: 1,000 streams through an infer route process (no race detector), a slow reader beside them"
	go test -count=1 -timeout 300s -v -run '^TestRouteHoldsManyStreams$' ./cmd | grep -E 'ROUTE|^(--- |ok|FAIL)'
fi

if section faults; then
	echo "== faults: kill -9 and SIGSTOP of a replica under load"
	go test -count=1 -timeout 300s -v -run '^(TestRouteKillReplicaUnderLoad|TestRouteStalledReplicaIsEjectedByDeadline)$' ./cmd | grep -E 'ROUTE|^(--- |ok|FAIL)'
fi

if section bench; then
	echo "== bench: the llm-d miniature through infer bench, policy by policy, then through HAProxy"
	OUT=${BENCH_OUT:-results}
	dur=()
	if [[ -n ${BENCH_DURATION:-} ]]; then dur=(--duration "$BENCH_DURATION"); fi
	[[ -n ${BENCH_SKIP_CLOSED:-} ]] || "$BIN" bench -s scenarios/route-llmd.yaml --no-tui -o "$OUT/route-llmd" "${dur[@]}" | tail -n 12
	"$BIN" bench -s scenarios/route-llmd-poisson.yaml --no-tui -o "$OUT/route-llmd-poisson" "${dur[@]}" | tail -n 12
	for i in 1 2 3 4; do
		start "r$i" "http://127.0.0.1:$((P + i))" "$BIN" serve --model sim-lm --max-seqs 32 --kv-tokens 16384 \
			--addr "127.0.0.1:$((P + i))" --log-level warn
	done
	# The scenario's ports (front 8180, replicas 8181-8184) moved to ours.
	sed -e "s/127.0.0.1:8180\b/127.0.0.1:$((P + 10))/" -e "s/127.0.0.1:8181\b/127.0.0.1:$((P + 1))/" \
		-e "s/127.0.0.1:8182\b/127.0.0.1:$((P + 2))/" -e "s/127.0.0.1:8183\b/127.0.0.1:$((P + 3))/" \
		-e "s/127.0.0.1:8184\b/127.0.0.1:$((P + 4))/" scenarios/route-llmd-haproxy.yaml >"$TMP/haproxy.yaml"
	for pair in "roundrobin|balance roundrobin" "leastconn|balance leastconn" "hash|balance hdr(X-Routing-Key)
	hash-type consistent"; do
		name=${pair%%|*}
		bal=${pair#*|}
		haproxy_cfg "$bal" | sed -e "s/^\tserver r2 .*/&\n\tserver r3 127.0.0.1:$((P + 3)) check inter 500ms\n\tserver r4 127.0.0.1:$((P + 4)) check inter 500ms/" >"$TMP/haproxy.cfg"
		start haproxy "$HAPROXY" haproxy -db -f "$TMP/haproxy.cfg"
		"$BIN" bench -s "$TMP/haproxy.yaml" --no-tui -o "$OUT/route-llmd-haproxy-$name" "${dur[@]}" | tail -n 6
		stop haproxy
		# Fresh replicas for the next front: cold caches, as infer bench gives each policy.
		for i in 1 2 3 4; do stop "r$i"; start "r$i" "http://127.0.0.1:$((P + i))" "$BIN" serve --model sim-lm \
			--max-seqs 32 --kv-tokens 16384 --addr "127.0.0.1:$((P + i))" --log-level warn; done
	done
	for i in 1 2 3 4; do stop "r$i"; done
fi

if section llmd; then
	echo "== llmd: 4 sim-lm replicas, 16 tenants x 3,072-token contexts, 128 streams in a closed loop, per policy"
	accept_tests ./cmd INFER_ROUTE_ACCEPT 1800s TestAcceptRouteLLMD
fi
