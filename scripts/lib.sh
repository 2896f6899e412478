# What the scripts/accept-*.sh scripts share; they source it from the
# repository root. The caller sets BIN (the infer binary), URL (the
# http://127.0.0.1:PORT its servers listen on) and TMP (a scratch directory
# it removes), and stops its server on exit (stop_server).

SERVER= # the pid of the server serve started

# serve ARGS...: (re)start `$BIN serve` on $URL with --log-level warn and
# ARGS, its output in $TMP/serve.log, and wait until /readyz answers: for up
# to READY_TIMEOUT seconds (default 120: a built-in model is generated on
# first use), failing at once if the server exits. SERVE_ENV, if set,
# prefixes the command (e.g. "env GOMAXPROCS=1"). Fails at once if another
# process already answers on $URL.
serve() {
	stop_server
	port_free "$URL"
	${SERVE_ENV:-} "$BIN" serve --addr "${URL#http://}" --log-level warn "$@" >"$TMP/serve.log" 2>&1 &
	SERVER=$!
	await_ready "$URL" "$SERVER" && return 0
	echo "infer serve $* did not become ready; its log:"
	cat "$TMP/serve.log"
	exit 1
}

# stop_server: drain the server serve started (with STOP_SIGNAL, default
# INT) and wait for it.
stop_server() {
	if [[ -n $SERVER ]]; then
		kill -"${STOP_SIGNAL:-INT}" "$SERVER" 2>/dev/null || true
		wait "$SERVER" 2>/dev/null || true
		SERVER=
	fi
}

# drain_server: SIGTERM the server serve started and wait for it; sets
# DRAIN_EXIT (its exit status) and DRAIN_SECONDS (how long it took, 0.00 s).
# shellcheck disable=SC2034 # both are the caller's
drain_server() {
	local t0 t1
	t0=$(date +%s.%N)
	kill -TERM "$SERVER"
	wait "$SERVER" && DRAIN_EXIT=0 || DRAIN_EXIT=$?
	t1=$(date +%s.%N)
	SERVER=
	DRAIN_SECONDS=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
}

# await_ready URL [PID [SECONDS]]: poll URL/readyz every 50 ms until it
# answers 2xx, for up to SECONDS (default READY_TIMEOUT, else 120); returns 1
# when the time is up or the process PID (if given) has exited.
await_ready() {
	local deadline=$((SECONDS + ${3:-${READY_TIMEOUT:-120}}))
	while ((SECONDS < deadline)); do
		curl -fsS "$1/readyz" >/dev/null 2>&1 && return 0
		[[ -z ${2:-} ]] || kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# port_free URL: exit 1, saying so, if some process already answers on URL
# (a measurement would go to it).
port_free() {
	if curl -s -o /dev/null "$1/healthz"; then echo "$1 is in use by another process"; exit 1; fi
}

# rss_kib [FIELD [PID]]: the FIELD (default VmRSS; VmHWM: the peak) of
# /proc/PID/status (default: the server serve started), in KiB.
rss_kib() { awk -v k="${1:-VmRSS}:" '$1 == k {print $2}' "/proc/${2:-$SERVER}/status"; }

# cpu_ticks [PID]: the user + system CPU time of PID (default: the server
# serve started) in clock ticks (getconf CLK_TCK a second).
cpu_ticks() { awk '{print $14 + $15}' "/proc/${1:-$SERVER}/stat"; }

# metric NAME [BASE]: the value of the sample NAME, labels included as
# /metrics writes them (infer_items_total{endpoint="batched"}), of the
# server at BASE (default $URL), as /metrics writes it; 0 when there is none.
metric() { curl -fsS "${2:-$URL}/metrics" | awk -v m="$1" '$1 == m {v = $2} END {print (v == "" ? 0 : v)}'; }

# section NAME: whether NAME is one of the SECTIONS asked for.
section() { [[ " ${SECTIONS[*]} " == *" $1 "* ]]; }

# vegeta_install: the vegeta command, at the version the project's library
# is, into $TMP; sets VEGETA.
vegeta_install() {
	GOBIN="$TMP" go install github.com/tsenart/vegeta/v12@v12.13.0
	VEGETA=$TMP/vegeta
}

# statuses FILE: a vegeta result file as its requests per status (and
# error), each with its p50, p99 and longest latency, then their total.
statuses() {
	"$VEGETA" encode --to csv <"$1" | python3 -c '
import csv, sys, collections
lat = collections.defaultdict(list)
for row in csv.reader(sys.stdin):
    lat[(int(row[1]), row[5][:70])].append(int(row[2]) / 1e6)
for (code, err), ls in sorted(lat.items()):
    ls.sort()
    p = lambda q: ls[min(len(ls) - 1, int(q * len(ls)))]
    what = f"{code} ({err})" if err else str(code)
    print(f"  status {what}: {len(ls)} requests, p50 {p(.5):.2f} ms, p99 {p(.99):.2f} ms, max {ls[-1]:.2f} ms")
print(f"  total {sum(map(len, lat.values()))} requests")
'
}

# bench BIN SCENARIO OUT [FLAGS...]: `BIN bench` of SCENARIO (a file, or a
# name in scenarios/) into the run directory OUT, without the live view or
# the report; its output in OUT.log.
bench() {
	local bin=$1 sc=$2 out=$3
	shift 3
	[ -f "$sc" ] || sc="scenarios/$sc.yaml"
	"$bin" bench -s "$sc" --no-tui --report=false -o "$out" "$@" >"$out.log" 2>&1 ||
		{ echo "bench $sc failed (exit $?), see $out.log" >&2; return 1; }
}

# section_tests SECTION...: the test functions that the associative array
# TESTS (section → test) names for the SECTIONs, into RUN; exits 2, naming
# the sections there are (and OTHER_SECTIONS, those the caller handles
# itself), on a section TESTS lacks.
# shellcheck disable=SC2034 # RUN is the caller's
section_tests() {
	RUN=()
	local s
	for s; do
		[[ -n "${TESTS[$s]:-}" ]] || { echo "unknown section $s (want: ${!TESTS[*]}${OTHER_SECTIONS:+ $OTHER_SECTIONS})"; exit 2; }
		RUN+=("${TESTS[$s]}")
	done
}

# accept_tests PACKAGE ENV TIMEOUT TEST...: run the env-gated acceptance
# tests (ENV=1 enables them) of PACKAGE, print their "ACCEPT" lines, and on
# failure the end of the log; returns go test's status.
accept_tests() {
	local pkg=$1 env=$2 timeout=$3 log status=0
	shift 3
	log=$(mktemp -t infer-accept.XXXXXX)
	env "$env=1" go test -count=1 -timeout "$timeout" -v -run "^($(IFS='|'; echo "$*"))\$" "$pkg" >"$log" 2>&1 || status=$?
	grep -E '^ACCEPT' "$log" || true
	if [[ $status -ne 0 ]]; then
		echo "== FAILED; the test log:"
		grep -v -E '^ACCEPT|^=== RUN' "$log" | tail -40
	fi
	rm -f "$log"
	return $status
}
