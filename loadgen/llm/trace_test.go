package llm

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models/bpe"
)

func TestReadTrace(t *testing.T) {
	in := "\xef\xbb\xbf" + `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}

{"timestamp": 0, "input_length": 512, "output_length": 0, "hash_ids": [0], "session": "x"}
{"hash_ids": [0, 14], "output_length": 3.0, "input_length": 513, "timestamp": 1500}
`
	recs, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	if r := recs[2]; r.Timestamp != 1500 || r.Input != 513 || r.Output != 3 || len(r.HashIDs) != 2 || r.HashIDs[1] != 14 || r.Line != 4 {
		t.Errorf("record 3 = %+v", r)
	}
	if recs[0].Line != 1 || recs[1].Line != 3 || recs[1].Output != 0 {
		t.Errorf("lines %d, %d; output %d", recs[0].Line, recs[1].Line, recs[1].Output)
	}
}

// TestReadTraceHostile: every bound of a trace file, each an error at its
// line.
func TestReadTraceHostile(t *testing.T) {
	good := `{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}` + "\n"
	for _, tc := range []struct {
		name, in string
		line     int
		want     string
	}{
		{"empty", "", 0, "no records"},
		{"blank lines only", "\n \n\t\n", 0, "no records"},
		{"not JSON", good + "hello\n", 2, "not a JSON record"},
		{"an array", good + "[1, 2]\n", 2, "not a JSON record"},
		{"two values", good + `{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [1]} {}` + "\n", 2, "more than one JSON value"},
		{"no timestamp", `{"input_length": 10, "output_length": 1, "hash_ids": [1]}`, 1, "no timestamp"},
		{"no input_length", `{"timestamp": 1, "output_length": 1, "hash_ids": [1]}`, 1, "no input_length"},
		{"no output_length", `{"timestamp": 1, "input_length": 1, "hash_ids": [1]}`, 1, "no output_length"},
		{"no hash_ids", `{"timestamp": 1, "input_length": 1, "output_length": 1}`, 1, "no hash_ids"},
		{"hash_ids null", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": null}`, 1, "no hash_ids"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp -1"},
		{"huge timestamp", `{"timestamp": 1e300, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp 1e300"},
		{"timestamp over 2^40", `{"timestamp": 1099511627777, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp 1099511627777: want 0 to"},
		{"fractional length", `{"timestamp": 1, "input_length": 1.5, "output_length": 1, "hash_ids": [1]}`, 1, "input_length 1.5: want a whole number"},
		{"zero input", `{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}`, 1, "input_length 0"},
		{"input over the bound", `{"timestamp": 1, "input_length": 8388609, "output_length": 1, "hash_ids": [1]}`, 1, "input_length 8388609"},
		{"output over the bound", `{"timestamp": 1, "input_length": 1, "output_length": 1048577, "hash_ids": [1]}`, 1, "output_length 1048577"},
		{"string length", `{"timestamp": 1, "input_length": "10", "output_length": 1, "hash_ids": [1]}`, 1, "input_length \"10\": want a number"},
		{"object length", `{"timestamp": 1, "input_length": {}, "output_length": 1, "hash_ids": [1]}`, 1, "want a number"},
		{"too few hash ids", `{"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}`, 1, "2 hash_ids for input_length 1025: want 3"},
		{"too many hash ids", `{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}`, 1, "want 1"},
		{"negative hash id", `{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [-4]}`, 1, "hash_ids[0] -4"},
		{"hash id not an integer", `{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1.5]}`, 1, "not a JSON record"},
		{"time goes back", good + `{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": [1]}`, 2, "before the previous record's 5"},
		{"line over 1 MiB", good + `{"timestamp": 6, "input_length": 10, "output_length": 1, "hash_ids": [1], "pad": "` + strings.Repeat("x", 1<<20) + `"}`, 2, "line over"},
	} {
		_, err := ReadTrace(strings.NewReader(tc.in))
		var te *TraceError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.name)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v; want it to say %q", tc.name, err, tc.want)
		case tc.line > 0 && (!errors.As(err, &te) || te.Line != tc.line):
			t.Errorf("%s: %v; want it at line %d", tc.name, err, tc.line)
		}
	}
}

// fiveRecords are at 0, 1, 2, 3 and 4 s, of 1,000 tokens (2 blocks) in and
// 100 out.
func fiveRecords() []TraceRecord {
	var recs []TraceRecord
	for i := range 5 {
		recs = append(recs, TraceRecord{Timestamp: int64(i) * 1000, Input: 1000, Output: 100, HashIDs: []int64{0, int64(i + 1)}, Line: i + 1})
	}
	return recs
}

func TestTraceWindow(t *testing.T) {
	tr := &TraceReplay{Records: fiveRecords(), Speed: 2, Start: 2 * time.Second, Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Scale: 1.0 / 32}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	// The warm-up replays the trace's 1 s before the window (0.5 s at
	// speed 2): the record at 1 s; the window holds those at 2 and 3 s.
	if from, win, to := tr.bounds(); from != 1 || win != 2 || to != 4 {
		t.Errorf("bounds %d, %d, %d; want 1, 2, 4", from, win, to)
	}
	if tr.WindowRequests() != 2 || tr.WallDuration() != time.Second || tr.Rate() != 2 {
		t.Errorf("window %d requests over %v at %v/s; want 2 over 1s at 2/s", tr.WindowRequests(), tr.WallDuration(), tr.Rate())
	}
	p := tr.Pacer()
	var at time.Duration
	var got []time.Duration
	for hits := uint64(0); ; hits++ {
		wait, stop := p.Pace(at, hits)
		if stop {
			break
		}
		at += wait
		got = append(got, at)
	}
	if want := []time.Duration{0, 500 * time.Millisecond, time.Second}; !equalDurations(got, want) {
		t.Errorf("arrivals %v, want %v", got, want)
	}
	if w, _ := p.Pace(2*time.Second, 1); w != 0 {
		t.Errorf("a late request waits %v, want 0", w)
	}
	// Duration 0: to the trace's end.
	tr.Duration = 0
	if tr.WindowRequests() != 3 || tr.WallDuration() != 1000500*time.Microsecond {
		t.Errorf("to the end: %d requests over %v; want 3 over the 2.001 s to the last, at speed 2", tr.WindowRequests(), tr.WallDuration())
	}
	for _, tc := range []struct {
		name string
		mod  func(*TraceReplay)
		want string
	}{
		{"scale not a whole block", func(t *TraceReplay) { t.Scale = 0.03 }, "whole number"},
		{"scale too small", func(t *TraceReplay) { t.Scale = 1.0 / 1024 }, "scale"},
		{"scale over 1", func(t *TraceReplay) { t.Scale = 2 }, "scale"},
		{"speed 0 (after defaults)", func(t *TraceReplay) { t.Speed = -1 }, "speed"},
		{"speed NaN", func(t *TraceReplay) { t.Speed = math.NaN() }, "speed"},
		{"window past the end", func(t *TraceReplay) { t.Start = time.Hour }, "holds no request"},
		{"negative start", func(t *TraceReplay) { t.Start = -time.Second }, "negative"},
		{"no records", func(t *TraceReplay) { t.Records = nil }, "no records"},
		{"a prompt over MaxLength", func(t *TraceReplay) {
			t.Scale = 1
			t.Records = []TraceRecord{{Timestamp: 2000, Input: MaxLength + 1, HashIDs: make([]int64, MaxLength/TraceBlock+1), Line: 9}}
		}, "line 9"},
	} {
		c := *tr
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTraceLengths(t *testing.T) {
	tr := &TraceReplay{Scale: 1.0 / 32}
	for _, tc := range []struct {
		in, out, blocks int
		wantIn, wantOut int
	}{
		{1000, 100, 2, 31, 3},   // 31.25 → 31
		{513, 0, 2, 17, 1},      // 16 would drop the second block: at least one token of it
		{512, 16, 1, 16, 1},     // 0.5 → 1 (round half away from zero)
		{1024, 2000, 2, 32, 63}, // 62.5 → 63
		{1, 1, 1, 1, 1},
	} {
		rec := TraceRecord{Input: tc.in, Output: tc.out, HashIDs: make([]int64, tc.blocks)}
		if in, out := tr.Lengths(&rec); in != tc.wantIn || out != tc.wantOut {
			t.Errorf("Lengths(%d in, %d out) = %d, %d; want %d, %d", tc.in, tc.out, in, out, tc.wantIn, tc.wantOut)
		}
	}
}

// TestTracePrompts: requests that share a hash id at a position share that
// block's tokens, and only while their ids agree.
func TestTracePrompts(t *testing.T) {
	tok := bpe.GPT2()
	recs := []TraceRecord{
		{Timestamp: 0, Input: 1536, Output: 64, HashIDs: []int64{1, 2, 3}},
		{Timestamp: 1, Input: 1536, Output: 64, HashIDs: []int64{1, 2, 9}},
		{Timestamp: 2, Input: 1536, Output: 64, HashIDs: []int64{5, 2, 3}},
		{Timestamp: 3, Input: 1300, Output: 64, HashIDs: []int64{1, 2, 3}}, // the last block partial
	}
	tr := &TraceReplay{Records: recs, Scale: 1.0 / 32}
	src, err := NewSource(PayloadConfig{API: Completions, Model: "m", Stream: true, IgnoreEOS: true, Seed: 3, Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([][]int32, len(recs))
	for i := range recs {
		r := src.Request(uint64(i))
		m := body(t, r)
		toks[i] = tok.Encode(m["prompt"].(string))
		in, out := tr.Lengths(&recs[i])
		if len(toks[i]) != in || r.PromptTokens != in || r.MaxTokens != out || m["ignore_eos"] != true {
			t.Errorf("request %d: %d tokens (said %d), max_tokens %d; want %d and %d", i, len(toks[i]), r.PromptTokens, r.MaxTokens, in, out)
		}
	}
	for _, tc := range []struct {
		a, b, min, max int
	}{
		{0, 1, 32, 33}, // blocks 1 and 2 shared, then 3 against 9
		{0, 2, 0, 1},   // the first block differs: nothing shared
		{0, 3, 41, 41}, // a prefix of the same blocks: all of the shorter (1300/32 = 40.6 → 41 tokens)
	} {
		if n := common(toks[tc.a], toks[tc.b]); n < tc.min || n > tc.max {
			t.Errorf("requests %d and %d share %d tokens; want %d to %d", tc.a, tc.b, n, tc.min, tc.max)
		}
	}
	// Chat: the prompt is one user message.
	src, _ = NewSource(PayloadConfig{API: Chat, Seed: 3, Trace: tr})
	if msgs := body(t, src.Request(0))["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["role"] != "user" {
		t.Errorf("chat messages %v", msgs)
	}
}

// rec16 is a record of blocks of 16 tokens after scale 1/32: in tokens,
// the hash ids given.
func rec16(ts int64, in int, ids ...int64) TraceRecord {
	return TraceRecord{Timestamp: ts, Input: in * 32, Output: 32, HashIDs: ids}
}

// TestHitRates checks the offline hit rates against cases worked by hand.
func TestHitRates(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		recs                  []TraceRecord
		block, capacity       int
		queries               int64
		unboundedHits, lruHit int64 // tokens
	}{
		{
			// r1 and r2 find blocks 0 and 1 (block 2 holds their last
			// token: always computed); r3 has no full block.
			name:  "prefix runs, last token computed",
			recs:  []TraceRecord{rec16(0, 48, 1, 2, 3), rec16(1, 48, 1, 2, 4), rec16(2, 48, 1, 2, 3), rec16(3, 10, 5)},
			block: 16, capacity: 3, queries: 154, unboundedHits: 64, lruHit: 64,
		},
		{
			// One block of room: each request keeps its first block
			// (released last, so most recently used), finds it next.
			name:  "capacity one block",
			recs:  []TraceRecord{rec16(0, 48, 1, 2, 3), rec16(1, 48, 1, 2, 4), rec16(2, 48, 1, 2, 3), rec16(3, 10, 5)},
			block: 16, capacity: 1, queries: 154, unboundedHits: 64, lruHit: 32,
		},
		{
			// r1 evicts r0's blocks; r2 finds none of them.
			name:  "LRU evicts",
			recs:  []TraceRecord{rec16(0, 32, 1, 2), rec16(1, 32, 3, 4), rec16(2, 32, 1, 2)},
			block: 16, capacity: 2, queries: 96, unboundedHits: 16, lruHit: 0,
		},
		{
			// Server blocks of 8 in trace blocks of 16: r1 shares trace
			// block 1, so server blocks 0 and 1.
			name:  "server blocks smaller",
			recs:  []TraceRecord{rec16(0, 32, 1, 2), rec16(1, 32, 1, 9)},
			block: 8, capacity: 100, queries: 64, unboundedHits: 16, lruHit: 16,
		},
		{
			// Server blocks of 32 over trace blocks of 16: server block 0
			// ends in trace block 1, and is shared when ids 1 and 2 are.
			name:  "server blocks larger",
			recs:  []TraceRecord{rec16(0, 64, 1, 2, 3, 4), rec16(1, 64, 1, 2, 5, 6), rec16(2, 64, 1, 7, 3, 4)},
			block: 32, capacity: 100, queries: 192, unboundedHits: 32, lruHit: 32,
		},
		{
			name: "no capacity: LRU not computed",
			recs: []TraceRecord{rec16(0, 32, 1, 2), rec16(1, 32, 1, 2)}, block: 16, capacity: 0, queries: 64, unboundedHits: 16, lruHit: 0,
		},
	} {
		tr := &TraceReplay{Records: tc.recs, Scale: 1.0 / 32}
		if err := tr.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		h, err := tr.HitRates(tc.block, tc.capacity)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wantU, wantL := float64(tc.unboundedHits)/float64(tc.queries), float64(tc.lruHit)/float64(tc.queries)
		if h.Queries != tc.queries || h.Unbounded != wantU || h.LRU != wantL || h.Capacity != tc.capacity || h.BlockSize != tc.block {
			t.Errorf("%s: %+v; want %d queries, unbounded %.4f, LRU %.4f", tc.name, h, tc.queries, wantU, wantL)
		}
	}
	// Only the window's requests count; the warm-up's fill the cache.
	tr := &TraceReplay{Records: []TraceRecord{rec16(0, 32, 1, 2), rec16(1000, 32, 1, 2)}, Scale: 1.0 / 32, Start: time.Second, Warmup: time.Second}
	if h, _ := tr.HitRates(16, 0); h.Queries != 32 || h.Unbounded != 0.5 {
		t.Errorf("with a warm-up: %+v; want 32 queries, half of them found", h)
	}
	if _, err := tr.HitRates(0, 5); err == nil {
		t.Error("block size 0 accepted")
	}
}

// FuzzReadTrace: a trace file never panics the reader, and what it accepts
// keeps every bound the replay relies on.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}` + "\n" +
		`{"timestamp": 3, "input_length": 512, "output_length": 0, "hash_ids": [0]}`))
	f.Add([]byte(`{"timestamp": 1e3, "input_length": 513.0, "output_length": 1, "hash_ids": [7, 7]}`))
	f.Add([]byte("\xef\xbb\xbf\n\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ReadTrace(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for i, r := range recs {
			if r.Timestamp < 0 || r.Input < 1 || r.Output < 0 || len(r.HashIDs) != (r.Input+TraceBlock-1)/TraceBlock ||
				(i > 0 && r.Timestamp < recs[i-1].Timestamp) {
				t.Fatalf("record %d out of bounds: %+v", i, r)
			}
		}
		tr := &TraceReplay{Records: recs, Scale: 1.0 / 32}
		if tr.Validate() == nil {
			src, err := NewSource(PayloadConfig{Trace: tr})
			if err != nil {
				t.Fatal(err)
			}
			src.Request(0)
			if _, err := tr.HitRates(16, 8); err != nil {
				t.Fatal(err)
			}
		}
	})
}
