#!/usr/bin/env bash
# Prefix caching on the ONNX Runtime decoders, served by `infer serve`:
#   ttft  time to first token of a request whose 512-token prompt prefix is
#         cached (a hit) against one whose prefix is new (a miss), on an
#         otherwise idle server: ROUNDS pairs, each a miss with a new prefix
#         and then a hit with the same prefix and another question, A B A B.
#         The client's TTFT is curl's time to the first byte of the stream
#         (the server answers with the first token); each request's cached
#         tokens are read from its Server-Timing header.
# Usage: scripts/accept-prefix-onnx.sh [section...] (default: all). MODEL
# (gpt2-tiny; stories260k works too), PREFIX (512, tokens of the shared
# prefix, about), ROUNDS (10), SERVE_ARGS (more flags of infer serve, e.g.
# "--threads 1") and PORT (28400) override the settings.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
make -s setup build
BIN=bin/infer
MODEL=${MODEL:-gpt2-tiny}
PREFIX=${PREFIX:-512}
ROUNDS=${ROUNDS:-10}
PORT=${PORT:-28400}
URL=http://127.0.0.1:$PORT
SECTIONS=${*:-ttft}
TMP=$(mktemp -d -t infer-prefix-onnx.XXXXXX)
trap 'stop_server; rm -rf "$TMP"' EXIT

# text SEED N: N words of a fixed vocabulary, drawn from SEED; about one
# GPT-2 token a word.
text() {
	awk -v seed="$1" -v n="$2" 'BEGIN {
		split("the river ran past an old mill where a miller kept his books of grain and debts while children played by water as seasons turned from spring to long dry summer", w, " ")
		srand(seed); s = "Story " seed ":"
		for (i = 0; i < n; i++) s = s " " w[int(rand() * length(w)) + 1]
		print s
	}'
}

# ask PROMPT: stream a completion of PROMPT (8 tokens) and print "TTFT_MS
# SERVER_TTFT_MS CACHED PROMPT_TOKENS": the client's TTFT, the server's
# (Server-Timing ttft), the prompt tokens found cached and all of them.
ask() {
	local body headers t cached ttft prompt
	body=$(jq -nc --arg p "$1" --arg m "$MODEL" '{model: $m, prompt: $p, max_tokens: 8, temperature: 0, stream: true,
		stream_options: {include_usage: true}}')
	t=$(curl -sS -N -o "$TMP/body" -D "$TMP/headers" -w '%{time_starttransfer}' -H 'Content-Type: application/json' \
		-d "$body" "$URL/v1/completions")
	headers=$(tr -d '\r' <"$TMP/headers")
	cached=$(sed -n 's/.*cached;desc=\([0-9]*\).*/\1/p' <<<"$headers")
	ttft=$(sed -n 's/.*ttft;dur=\([0-9.]*\).*/\1/p' <<<"$headers")
	prompt=$(grep -o '"prompt_tokens":[0-9]*' "$TMP/body" | tail -1 | cut -d: -f2)
	LC_ALL=C awk -v t="$t" -v s="${ttft:-0}" -v c="${cached:-0}" -v p="${prompt:-?}" 'BEGIN {printf "%.2f %.2f %s %s\n", t * 1000, s, c, p}'
}

# median X...: the median of the numbers.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

if section ttft; then
	echo "== ttft: $MODEL, a ${PREFIX}-token prefix cached (hit) or new (miss), $ROUNDS pairs"
	# shellcheck disable=SC2086 # SERVE_ARGS are words
	serve --model "$MODEL" ${SERVE_ARGS:-}
	# Warm up: the first requests of a fresh server pay for allocations.
	for i in 1 2; do ask "$(text "$((900 + i))" "$PREFIX") Warm up." >/dev/null; done
	misses=() hits=() smisses=() shits=()
	for r in $(seq 1 "$ROUNDS"); do
		prefix=$(text "$r$RANDOM" "$PREFIX")
		read -r miss smiss mc mp < <(ask "$prefix Then the miller said")
		read -r hit shit hc hp < <(ask "$prefix At night the children dreamed")
		LC_ALL=C printf '  pair %2d: miss %7.2f ms (server %7.2f; %s of %s prompt tokens cached)  hit %7.2f ms (server %7.2f; %s of %s cached)  %5.1fx\n' \
			"$r" "$miss" "$smiss" "$mc" "$mp" "$hit" "$shit" "$hc" "$hp" "$(awk -v a="$miss" -v b="$hit" 'BEGIN {print a / b}')"
		misses+=("$miss") hits+=("$hit") smisses+=("$smiss") shits+=("$shit")
	done
	m=$(median "${misses[@]}") h=$(median "${hits[@]}") sm=$(median "${smisses[@]}") sh=$(median "${shits[@]}")
	LC_ALL=C printf '  median TTFT: miss %.2f ms, hit %.2f ms: a hit is %.1fx faster (target >= 3x); server-side %.2f and %.2f ms, %.1fx\n' \
		"$m" "$h" "$(awk -v a="$m" -v b="$h" 'BEGIN {print a / b}')" "$sm" "$sh" "$(awk -v a="$sm" -v b="$sh" 'BEGIN {print a / b}')"
	stop_server
fi
