#!/usr/bin/env bash
# Reruns the batching-policy comparison of issue 14 and prints each figure
# of its acceptance next to its bar. Every figure is a ratio of policies
# measured side by side in one run of one scenario.
#
#   [ROUNDS=n] scripts/accept-policies.sh [SCENARIO...]   run, then report
#   scripts/accept-policies.sh report RUN_DIR...   report runs of one scenario
#   scripts/accept-policies.sh ab OLD_BIN SCENARIO [ROUNDS] [BENCH_FLAGS...]
#
# SCENARIO is a name in scenarios/ or a scenario file.
#
# Default scenarios: policies-quick, policies-closed-sim,
# policies-closed-sim-fast, policies-sim, policies-sim-fast and
# single-client (about 25 minutes; policies-bert needs scripts/setup-ort.sh
# and adds 4½). Runs go to results/accept-policies-<time>/<scenario>-<i>.
# With ROUNDS=n every scenario runs n times, in turn, and each figure is the
# median over its runs: on a shared machine, use 3 or more. A scenario with
# load.repeats (interleaved, policies-closed-sim-fast) gives a figure per
# repeat, and the median is over all of them.
#
# Bars, per scenario:
#   policies-quick            adaptive req/s ≥ 0.95 × fixed's at every point
#   policies-closed-sim*      at every client count: adaptive req/s ≥ 0.95 ×
#                             the better of fixed and immediate, and its p99
#                             ≤ 1.1 × the lower p99 of the two
#   policies-sim*, -bert      (open loop) adaptive p99 ≤ 1.1 × the better other
#                             at every load level below the saturating one; at
#                             that one adaptive req/s ≥ 0.97 × fixed's
#   single-client             adaptive p50 ≤ 80 ms
#
# ab: noise, not policies. It runs SCENARIO with OLD_BIN (e.g. a build of
# the previous commit) and with bin/infer in turn, A B A B ..., ROUNDS
# times each (default 2), and prints every point's throughput and p99 per
# run with the ratio of the medians (new ÷ old). A change is signal only
# where the two binaries' ranges do not overlap.
#
# The exit status is 1 when a bar is missed. The machine's load moves
# every figure; rerun on a quiet machine before quoting one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
command -v jq >/dev/null || { echo "jq missing: apt-get install -y jq" >&2; exit 2; }

# jq: a record's figures, with Go durations ("1m2.5s", "850µs") in ms.
JQ_DEFS='
def ms: [scan("([0-9.]+)(h|ms|µs|us|ns|m|s)")]
  | map((.[0] | tonumber) * ({"h": 3600000, "m": 60000, "s": 1000, "ms": 1, "µs": 0.001, "us": 0.001, "ns": 0.000001}[.[1]]))
  | add // 0;
def level: .point.load.concurrency // .point.load.rate;
def fig: {policy: .point.policy, thr: .throughput, p50: (.latency.p50 | ms), p99: (.latency.p99 | ms)};
# figs: the figures of a record once per repeat when it kept them (load.repeats
# above 1), else once for the whole point.
def figs: if (.repeats // []) | length > 0
  then .point.policy as $pol | .repeats[] | {policy: $pol, thr: .throughput, p50: (.p50 | ms), p99: (.p99 | ms)}
  else fig end;
def r2: . * 100 | round / 100;
def cell: "\(.policy) \(.thr | round)/s p50 \(.p50 | r2) p99 \(.p99 | r2)";
'

# report RUN_DIR...: print the figures of runs of one scenario (medians
# over the runs, point by point) and whether they meet the bars; returns 1
# when one is missed.
report() {
	local name mode out
	name=$(jq -r .scenario "$1/manifest.json")
	mode=$(jq -r 'select(.point.endpoint == "batched") | .point.load.mode' "$1/results.jsonl" | head -1)
	case $name in
	policies-quick) mode=quick ;;
	single-client) mode=single ;;
	esac
	out="$1/accept.txt"
	echo "== $name: $(printf '%s ' "$@")($# run(s); medians)"
	local files=()
	for d in "$@"; do files+=("$d/results.jsonl"); done
	jq -s -r --arg mode "$mode" "$JQ_DEFS"'
	  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	  map(select(.point.endpoint == "batched" and .point.policy != null)
	      | {cfg: [.point.workers, .point.batch, .point.max_latency], level: level, mode: .point.load.mode} + figs)
	  | group_by([.cfg, .level, .policy])
	  | map(.[0] + {thr: (map(.thr) | median), p50: (map(.p50) | median), p99: (map(.p99) | median)})
	  | group_by(.cfg) | .[]
	  | (map(.level) | max) as $top
	  | group_by(.level) | .[]
	  | INDEX(.policy) as $p
	  | (.[0] | "w=\(.cfg[0]) b=\(.cfg[1]) \(if .mode == "closed" then "c=\(.level)" else "\(.level)/s" end)") as $lab
	  | ($p.adaptive) as $a
	  | [$p.fixed, $p.immediate] | map(select(. != null)) as $others
	  | if $a == null or ($others | length) == 0 then "\($lab): no adaptive or no other policy" else
	    ($others | map(.thr) | max) as $bestThr
	    | ($others | map(.p99) | min) as $bestP99
	    | (if $mode == "quick" then
	         [{name: "req/s ÷ fixed", v: ($a.thr / $p.fixed.thr), ok: ($a.thr >= 0.95 * $p.fixed.thr)}]
	       elif $mode == "closed" then
	         [{name: "req/s ÷ best", v: ($a.thr / $bestThr), ok: ($a.thr >= 0.95 * $bestThr)},
	          {name: "p99 ÷ best", v: ($a.p99 / $bestP99), ok: ($a.p99 <= 1.1 * $bestP99)}]
	       elif $mode == "single" then
	         [{name: "p50 ms", v: $a.p50, ok: ($a.p50 <= 80)}]
	       elif $a.level == $top then
	         [{name: "req/s ÷ fixed", v: ($a.thr / $p.fixed.thr), ok: ($a.thr >= 0.97 * $p.fixed.thr)}]
	       else
	         [{name: "p99 ÷ best", v: ($a.p99 / $bestP99), ok: ($a.p99 <= 1.1 * $bestP99)}]
	       end) as $bars
	    | "\($lab): " + ([$p.fixed, $p.immediate, $a] | map(select(. != null) | cell) | join(" | "))
	      + "  ⇒  " + ($bars | map("\(.name) \(.v | r2) \(if .ok then "ok" else "MISSED" end)") | join(", "))
	    end
	' "${files[@]}" >"$out" || return 1
	cat "$out"
	! grep -q MISSED "$out"
}

case ${1:-} in
report)
	shift
	[ $# -gt 0 ] || { echo "usage: $0 report RUN_DIR..." >&2; exit 2; }
	report "$@"
	exit
	;;
ab)
	[ $# -ge 3 ] || { echo "usage: $0 ab OLD_BIN SCENARIO [ROUNDS] [BENCH_FLAGS...]" >&2; exit 2; }
	old=$2 sc=$3 rounds=${4:-2}
	shift $(($# < 4 ? $# : 4))
	make -s build
	top="results/accept-policies-ab-$(basename "$sc" .yaml)-$(date -u +%Y%m%dT%H%M%S)"
	mkdir -p "$top"
	for i in $(seq 1 "$rounds"); do
		bench "$old" "$sc" "$top/old-$i" "$@"
		bench bin/infer "$sc" "$top/new-$i" "$@"
	done
	# Per point: each run's figures, then median(new) ÷ median(old).
	for f in "$top"/*/results.jsonl; do
		run=$(basename "$(dirname "$f")")
		jq -c --arg run "$run" "$JQ_DEFS"'{run: $run, point: .point.name, thr: .throughput, p99: (.latency.p99 | ms)}' "$f"
	done | jq -s -r "$JQ_DEFS"'
	  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	  group_by(.point) | .[]
	  | (map(select(.run | startswith("old")))) as $o | (map(select(.run | startswith("new")))) as $n
	  | "\(.[0].point): old \($o | map("\(.thr | round)/s \(.p99 | r2)ms") | join(", ")) · new \($n | map("\(.thr | round)/s \(.p99 | r2)ms") | join(", "))"
	    + "  ⇒  req/s \(($n | map(.thr) | median) / ($o | map(.thr) | median) | r2)×, p99 \(($n | map(.p99) | median) / ($o | map(.p99) | median) | r2)×"
	    + (if ($n | map(.thr) | max) < ($o | map(.thr) | min) or ($n | map(.thr) | min) > ($o | map(.thr) | max) then " (req/s ranges apart)" else "" end)
	' | tee "$top/ab.txt"
	exit 0
	;;
esac

scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(policies-quick policies-closed-sim policies-closed-sim-fast policies-sim policies-sim-fast single-client)
rounds=${ROUNDS:-1}
make -s build
top="results/accept-policies-$(date -u +%Y%m%dT%H%M%S)"
mkdir -p "$top"
for i in $(seq 1 "$rounds"); do
	for sc in "${scenarios[@]}"; do
		bench bin/infer "$sc" "$top/$sc-$i"
	done
done
status=0
for sc in "${scenarios[@]}"; do
	runs=()
	for i in $(seq 1 "$rounds"); do runs+=("$top/$sc-$i"); done
	report "${runs[@]}" || status=1
done
echo "runs and figures in $top"
exit $status
