package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
)

// Trace replay: Mooncake's JSONL request traces (FAST'25), one request a
// line: {"timestamp": ms from the trace's start, "input_length": prompt
// tokens, "output_length": answer tokens, "hash_ids": [one id per
// TraceBlock tokens of the prompt, the last block maybe partial]}. Two
// requests with the same id at a position share that block's tokens, and
// (an id stands for its whole prefix) everything before it.

// Trace bounds: a trace file is input from anywhere.
const (
	// TraceBlock is the tokens of one hash id in Mooncake's traces.
	TraceBlock = 512
	// MaxTraceRecords bounds the requests of a trace.
	MaxTraceRecords = 1 << 20
	// MaxTraceBlocks bounds one request's hash ids (8M tokens).
	MaxTraceBlocks = 1 << 14
	// MaxTraceHashIDs bounds the hash ids of a whole trace.
	MaxTraceHashIDs = 1 << 24
	// maxTraceLine bounds one line of a trace file.
	maxTraceLine = 1 << 20
	// maxTimestamp bounds a timestamp (ms): about 35 years.
	maxTimestamp = 1 << 40
)

// TraceRecord is one request of a trace.
type TraceRecord struct {
	Timestamp int64 // ms from the trace's start
	Input     int   // prompt tokens
	Output    int   // answer tokens
	HashIDs   []int64
	Line      int // in the file, from 1
}

// TraceError is a bad line of a trace file.
type TraceError struct {
	Line int
	Err  error
}

func (e *TraceError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *TraceError) Unwrap() error { return e.Err }

// traceLine is one line as decoded; a nil field is missing.
type traceLine struct {
	Timestamp json.RawMessage `json:"timestamp"`
	Input     json.RawMessage `json:"input_length"`
	Output    json.RawMessage `json:"output_length"`
	HashIDs   *[]int64        `json:"hash_ids"`
}

// ReadTraceFile reads a trace file; see ReadTrace.
func ReadTraceFile(path string) ([]TraceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// ReadTrace reads a Mooncake trace: JSON lines, empty lines skipped, other
// fields of a record ignored. Every bound is checked and a bad record is
// an error naming its line: a missing field, a negative or fractional
// number, timestamps that go back, hash_ids not one per 512 tokens of
// input_length, a line over 1 MiB, more than MaxTraceRecords records or
// MaxTraceHashIDs ids.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var recs []TraceRecord
	ids := 0
	for line := 1; ; line++ {
		b, rerr := readBounded(br, maxTraceLine)
		if rerr != nil && rerr != io.EOF {
			return nil, &TraceError{Line: line, Err: rerr}
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(b)) > 0 {
			if len(recs) >= MaxTraceRecords {
				return nil, &TraceError{Line: line, Err: fmt.Errorf("more than %d records", MaxTraceRecords)}
			}
			rec, err := parseTraceLine(b)
			if err != nil {
				return nil, &TraceError{Line: line, Err: err}
			}
			if n := len(recs); n > 0 && rec.Timestamp < recs[n-1].Timestamp {
				return nil, &TraceError{Line: line, Err: fmt.Errorf("timestamp %d is before the previous record's %d: a trace is in order of arrival", rec.Timestamp, recs[n-1].Timestamp)}
			}
			if ids += len(rec.HashIDs); ids > MaxTraceHashIDs {
				return nil, &TraceError{Line: line, Err: fmt.Errorf("more than %d hash ids in all", MaxTraceHashIDs)}
			}
			rec.Line = line
			recs = append(recs, rec)
		}
		if rerr == io.EOF {
			break
		}
	}
	if len(recs) == 0 {
		return nil, errors.New("no records")
	}
	return recs, nil
}

func parseTraceLine(b []byte) (TraceRecord, error) {
	var tl traceLine
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&tl); err != nil {
		return TraceRecord{}, fmt.Errorf("not a JSON record: %w", err)
	}
	if dec.More() {
		return TraceRecord{}, errors.New("more than one JSON value on the line")
	}
	var rec TraceRecord
	whole := func(name string, raw json.RawMessage, lo, hi int64) (int64, error) {
		if raw == nil || string(raw) == "null" {
			return 0, fmt.Errorf("no %s", name)
		}
		if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return 0, fmt.Errorf("%s %s: want a number", name, raw)
		}
		v, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(raw), 64)
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return 0, fmt.Errorf("%s %s: want a whole number", name, raw)
			}
			v = int64(f)
		}
		if v < lo || v > hi {
			return 0, fmt.Errorf("%s %d: want %d to %d", name, v, lo, hi)
		}
		return v, nil
	}
	ts, err := whole("timestamp", tl.Timestamp, 0, maxTimestamp)
	if err != nil {
		return rec, err
	}
	in, err := whole("input_length", tl.Input, 1, MaxTraceBlocks*TraceBlock)
	if err != nil {
		return rec, err
	}
	out, err := whole("output_length", tl.Output, 0, MaxLength)
	if err != nil {
		return rec, err
	}
	if tl.HashIDs == nil {
		return rec, errors.New("no hash_ids")
	}
	hs := *tl.HashIDs
	if want := (int(in) + TraceBlock - 1) / TraceBlock; len(hs) != want {
		return rec, fmt.Errorf("%d hash_ids for input_length %d: want %d, one per %d tokens (the last block may be partial)", len(hs), in, want, TraceBlock)
	}
	for i, h := range hs {
		if h < 0 {
			return rec, fmt.Errorf("hash_ids[%d] %d: want an id of 0 or more", i, h)
		}
	}
	return TraceRecord{Timestamp: ts, Input: int(in), Output: int(out), HashIDs: hs}, nil
}

// readBounded reads one line of at most limit bytes (of a prompt or a
// trace file).
func readBounded(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := br.ReadLine()
		line = append(line, part...)
		if len(line) > limit {
			return nil, fmt.Errorf("line over %d bytes", limit)
		}
		if err != nil || !isPrefix {
			return line, err
		}
	}
}

// TraceReplay replays a window of a trace. The requests whose timestamps
// fall in [Start, Start+Duration) of the trace's time are the measured
// window; those of the Warmup·Speed before Start are sent first, in the
// run's warm-up. Arrivals keep the trace's gaps divided by Speed.
// Lengths and the block size are multiplied by Scale, so that a model of a
// short context can take the trace's prompts: at Scale 1/32 a 512-token
// block is 16 tokens.
type TraceReplay struct {
	Records []TraceRecord
	// Speed divides the trace's time (2: twice as fast). Default 1.
	Speed float64
	// Start and Duration bound the window in the trace's time; Duration
	// 0 runs to the trace's end.
	Start, Duration time.Duration
	// Warmup is the run's warm-up, in wall time.
	Warmup time.Duration
	// Scale multiplies lengths and the block size; TraceBlock·Scale must
	// be a whole number of tokens. Default 1.
	Scale float64
}

// Bounds of TraceReplay's knobs.
const (
	MaxTraceSpeed = 1000
	minTraceScale = 1.0 / TraceBlock
)

// Validate checks t's knobs (not its records, which ReadTrace checked).
func (t *TraceReplay) Validate() error {
	switch {
	case len(t.Records) == 0:
		return errors.New("no records")
	case !(t.speed() > 0 && t.speed() <= MaxTraceSpeed):
		return fmt.Errorf("speed %v: want more than 0, at most %d", t.Speed, MaxTraceSpeed)
	case !(t.scale() >= minTraceScale && t.scale() <= 1):
		return fmt.Errorf("scale %v: want 1/%d to 1", t.Scale, TraceBlock)
	case t.Start < 0 || t.Duration < 0 || t.Warmup < 0:
		return errors.New("start, duration and warm-up must not be negative")
	}
	if b := TraceBlock * t.scale(); b != math.Trunc(b) {
		return fmt.Errorf("scale %v: a block of %d tokens becomes %v; choose a scale that makes it a whole number, like 1/32 = 0.03125 (16 tokens)", t.Scale, TraceBlock, b)
	}
	from, win, to := t.bounds()
	if to == win {
		return fmt.Errorf("the window from %v for %v of the trace holds no request (the trace spans %v)", t.Start, t.Duration, t.span())
	}
	for i := from; i < to; i++ {
		if in, _ := t.Lengths(&t.Records[i]); in > MaxLength {
			return fmt.Errorf("line %d: input_length %d is %d tokens at scale %v, over %d; replay a smaller scale or another window", t.Records[i].Line, t.Records[i].Input, in, t.scale(), MaxLength)
		}
	}
	return nil
}

func (t *TraceReplay) speed() float64 {
	if t.Speed == 0 {
		return 1
	}
	return t.Speed
}

func (t *TraceReplay) scale() float64 {
	if t.Scale == 0 {
		return 1
	}
	return t.Scale
}

// span is the trace's time from its first record to its last.
func (t *TraceReplay) span() time.Duration {
	if len(t.Records) == 0 {
		return 0
	}
	return time.Duration(t.Records[len(t.Records)-1].Timestamp-t.Records[0].Timestamp) * time.Millisecond
}

// BlockTokens is a block's tokens after scaling.
func (t *TraceReplay) BlockTokens() int { return int(TraceBlock * t.scale()) }

// at returns a record's time in the trace.
func at(rec *TraceRecord) time.Duration { return time.Duration(rec.Timestamp) * time.Millisecond }

// bounds returns the records replayed: [from, to), of which [win, to) are
// in the measured window.
func (t *TraceReplay) bounds() (from, win, to int) {
	warm := t.Start - time.Duration(float64(t.Warmup)*t.speed())
	end := time.Duration(math.MaxInt64)
	if t.Duration > 0 {
		end = t.Start + t.Duration
	}
	for i := range t.Records {
		a := at(&t.Records[i])
		if a < warm {
			from = i + 1
		}
		if a < t.Start {
			win = i + 1
		}
		if a < end {
			to = i + 1
		}
	}
	return from, max(win, from), max(to, win, from)
}

// window returns the requests in the measured window.
func (t *TraceReplay) window() int {
	_, win, to := t.bounds()
	return to - win
}

// WindowRequests returns the requests in the measured window.
func (t *TraceReplay) WindowRequests() int { return t.window() }

// WallDuration is the measured window in wall time: its span in the trace
// (to the last request, when Duration is 0) divided by Speed.
func (t *TraceReplay) WallDuration() time.Duration {
	d := t.Duration
	if d == 0 {
		_, win, to := t.bounds()
		if to > win {
			d = at(&t.Records[to-1]) - t.Start + time.Millisecond
		}
	}
	return time.Duration(float64(d) / t.speed())
}

// Rate is the window's mean arrival rate in wall time (requests/s).
func (t *TraceReplay) Rate() float64 {
	if w := t.WallDuration().Seconds(); w > 0 {
		return float64(t.window()) / w
	}
	return 0
}

// Lengths returns a record's prompt and answer tokens after scaling: the
// prompt keeps its number of blocks (len(HashIDs) of BlockTokens, the
// last maybe partial), the answer at least 1.
func (t *TraceReplay) Lengths(rec *TraceRecord) (in, out int) {
	bt := t.BlockTokens()
	k := len(rec.HashIDs)
	in = int(math.Round(float64(rec.Input) * t.scale()))
	in = min(max(in, (k-1)*bt+1), k*bt)
	out = max(int(math.Round(float64(rec.Output)*t.scale())), 1)
	return in, out
}

// tracePacer paces a replay's requests at their offsets from the run's
// start.
type tracePacer struct {
	at   []time.Duration
	rate float64
}

// Pacer returns the replay's arrivals: the first request of the warm-up
// part at the run's start, the window's first at Warmup.
func (t *TraceReplay) Pacer() Pacer {
	from, _, to := t.bounds()
	p := &tracePacer{at: make([]time.Duration, 0, to-from), rate: t.Rate()}
	for i := from; i < to; i++ {
		off := t.Warmup + time.Duration(float64(at(&t.Records[i])-t.Start)/t.speed())
		p.at = append(p.at, max(off, 0))
	}
	return p
}

func (p *tracePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p.at)) {
		return 0, true
	}
	return max(p.at[hits]-elapsed, 0), false
}

func (p *tracePacer) Rate(time.Duration) float64 { return p.rate }

// traceSource makes a replay's requests: request i is the i-th replayed.
type traceSource struct {
	cfg  *PayloadConfig
	recs []TraceRecord
}

func newTraceSource(cfg *PayloadConfig) (*traceSource, error) {
	t := cfg.Trace
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	from, _, to := t.bounds()
	return &traceSource{cfg: cfg, recs: t.Records[from:to]}, nil
}

// Request makes replayed request i: a prompt whose blocks are drawn from
// their hash ids' word streams, so that requests sharing an id at a
// position share that block's tokens.
func (s *traceSource) Request(i uint64) *Request {
	t := s.cfg.Trace
	rec := &s.recs[i%uint64(len(s.recs))]
	in, out := t.Lengths(rec)
	bt := t.BlockTokens()
	b := make([]byte, 0, in*8)
	for j, h := range rec.HashIDs {
		n := min(bt, in-j*bt)
		b = appendWords(b, rand.New(rand.NewPCG(s.cfg.Seed^keyBlock, uint64(h))), n)
	}
	if s.cfg.API == Chat {
		return s.cfg.request([]Message{{Role: "user", Content: string(b)}}, out, in)
	}
	return s.cfg.request(string(b), out, in)
}
