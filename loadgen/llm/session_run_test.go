package llm_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/llm/llmtest"
)

// runSessions runs a multi-turn workload of payload on a closed loop of
// clients against a fake of fake, in a synctest bubble, and returns the
// outcome and what the fake was sent.
func runSessions(t *testing.T, fake llmtest.Config, payload llm.PayloadConfig, clients int, warmup, window time.Duration) (*llm.Outcome, []llmtest.Exchange) {
	t.Helper()
	var out *llm.Outcome
	var log []llmtest.Exchange
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.New(fake)
		hc, url, stop := llmtest.ServePipe(srv)
		defer stop()
		c, err := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc})
		if err != nil {
			t.Fatal(err)
		}
		src, err := llm.NewSource(payload)
		if err != nil {
			t.Fatal(err)
		}
		out, err = llm.Run(context.Background(), llm.RunConfig{Client: c, Source: src, API: payload.API, Stream: payload.Stream,
			Concurrency: clients, Warmup: warmup, Duration: window, Histograms: true})
		if err != nil {
			t.Fatal(err)
		}
		log = srv.Exchanges()
	})
	return out, log
}

// The sessions' lengths: a 40-word first message, 10-word messages after,
// 5-token answers. The fake's first token comes 10 ms after a request,
// plus 1 ms per prompt word it has not seen at the start of an earlier
// prompt.
var (
	fiveTurns = llm.PayloadConfig{API: llm.Chat, Model: "fake", Stream: true, OutputTokens: llm.Fixed(5), Seed: 1,
		MultiTurn: &llm.MultiTurn{Turns: 5, ThinkTime: 100 * time.Millisecond, FirstTokens: llm.Fixed(40), MessageTokens: llm.Fixed(10)}}
	turnFake = llmtest.Config{Timing: llmtest.Timing{FirstToken: 10 * time.Millisecond, Interval: time.Millisecond},
		PerUncached: time.Millisecond, Vary: true, Log: true}
)

// TestSessionsCarryAnswers: every turn sends the conversation so far,
// with the answers the server actually gave, and a new message.
func TestSessionsCarryAnswers(t *testing.T) {
	_, log := runSessions(t, turnFake, fiveTurns, 3, 0, 2*time.Second)
	if len(log) < 30 {
		t.Fatalf("%d requests; want sessions of 5 turns to have run", len(log))
	}
	// A session is known by its first message; its turns come in order.
	sessions := map[string][]llmtest.Exchange{}
	for _, e := range log {
		sessions[e.Messages[0]] = append(sessions[e.Messages[0]], e)
	}
	full := 0
	for first, turns := range sessions {
		if len(turns) > 5 {
			t.Fatalf("session %.30q… has %d turns; want at most 5 (or two sessions began alike)", first, len(turns))
		}
		if len(turns) == 5 {
			full++
		}
		for i, e := range turns {
			if len(e.Messages) != 2*i+1 || !strings.HasPrefix(e.Messages[len(e.Messages)-1], "user: ") {
				t.Fatalf("turn %d of a session: messages %q", i+1, e.Messages)
			}
			if i == 0 {
				continue
			}
			prev := turns[i-1]
			want := append(slices.Clone(prev.Messages), "assistant: "+prev.Answer)
			if !slices.Equal(e.Messages[:2*i], want) {
				t.Fatalf("turn %d sends %q; want the conversation so far, with the server's answer, %q", i+1, e.Messages[:2*i], want)
			}
		}
	}
	if full < 3 {
		t.Errorf("%d sessions ran all 5 turns; want several", full)
	}
	// The answers differ (Vary): the test above would not catch answers
	// made up by the client otherwise.
	if log[0].Answer == log[1].Answer {
		t.Errorf("the fake's answers repeat: %q", log[0].Answer)
	}
}

// TestSessionsStaggered: the sessions of a closed loop start a share of
// a think time apart, so that their turns do not arrive in step.
func TestSessionsStaggered(t *testing.T) {
	_, log := runSessions(t, turnFake, fiveTurns, 4, 0, 300*time.Millisecond)
	var firsts []time.Duration
	for _, e := range log {
		if len(e.Messages) == 1 {
			firsts = append(firsts, e.At.Sub(log[0].At))
		}
	}
	// 100 ms of think time over 4 clients.
	want := []time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond}
	if len(firsts) < 4 || !slices.Equal(firsts[:4], want) {
		t.Errorf("the first turns came at %v; want %v", firsts, want)
	}
}

// TestSessionsTTFTByTurn: the record's TTFT by turn is what the fake's
// emulated prefill makes it, exactly (virtual time): with a prefix cache a
// later turn computes only the last answer and its new message; without,
// the whole conversation again.
func TestSessionsTTFTByTurn(t *testing.T) {
	ms := func(n int) float64 { return float64(n) }
	for _, tc := range []struct {
		name   string
		prefix bool
		want   []float64 // TTFT by turn, ms
		cached []float64
	}{
		// Turn t ≥ 2: 5 answer words and 10 new ones uncached.
		{"cache", true, []float64{ms(10 + 40), ms(10 + 15), ms(10 + 15), ms(10 + 15), ms(10 + 15)}, []float64{0, 40, 55, 70, 85}},
		// Turn t: 40 + 15(t−1) words, all computed.
		{"no cache", false, []float64{ms(10 + 40), ms(10 + 55), ms(10 + 70), ms(10 + 85), ms(10 + 100)}, nil},
	} {
		fake := turnFake
		fake.Prefix = tc.prefix
		out, _ := runSessions(t, fake, fiveTurns, 4, 500*time.Millisecond, 3*time.Second)
		turns := out.LLM.Turns
		if len(turns) != 5 {
			t.Fatalf("%s: %d turns in the record, want 5", tc.name, len(turns))
		}
		for i, turn := range turns {
			if turn.Turn != i+1 || turn.TTFT.N == 0 || turn.TTFT.P50 != tc.want[i] || turn.TTFT.Max != tc.want[i] {
				t.Errorf("%s: turn %d: %+v; want TTFT %v ms (p50 and max)", tc.name, i+1, turn, tc.want[i])
			}
			// Sessions' words are drawn apart: two may begin with the same
			// word (1 in 195), which the fake counts as cached.
			if tc.cached != nil && !near(turn.CachedTokens, tc.cached[i], 0.5) {
				t.Errorf("%s: turn %d: %v cached tokens on average, want %v", tc.name, i+1, turn.CachedTokens, tc.cached[i])
			}
		}
		h := out.LLM.Histograms
		if len(h.Turns) != 5 || h.Turns[4].Count() != turns[4].TTFT.N {
			t.Errorf("%s: turn histograms %v", tc.name, h.Turns)
		}
		p := out.LLM.Prefix
		switch {
		case !tc.prefix && p != nil:
			t.Errorf("no cache: prefix figures %+v from answers that said nothing", p)
		case tc.prefix && (p == nil || p.Reported != out.LLM.Completed || p.Hits+p.Misses != p.Reported):
			t.Errorf("cache: prefix figures %+v for %d completed", p, out.LLM.Completed)
		case tc.prefix && (p.TTFTMiss.P50 != 50 || p.TTFTHit.P50 != 25 || p.TTFTHit.Max != 25):
			// Turn 1 misses; from turn 2 on, most of the prompt is cached.
			t.Errorf("cache: TTFT of hits %+v, of misses %+v; want 25 ms and 50 ms", p.TTFTHit, p.TTFTMiss)
		}
	}
}

// TestSessionsNeedClosedLoop: a multi-turn workload is not paced.
func TestSessionsNeedClosedLoop(t *testing.T) {
	src, err := llm.NewSource(fiveTurns)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := llm.NewClient(llm.ClientConfig{BaseURL: "http://x"})
	_, err = llm.Run(context.Background(), llm.RunConfig{Client: c, Source: src, Pacer: constant{time.Millisecond}, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "closed loop") {
		t.Errorf("Run with a pacer: %v; want an error saying sessions need a closed loop", err)
	}
}
