package llm

import (
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// seconds keeps a window second by second: the output tokens received and
// the requests completed in each (whenever sent), and the TTFT of the
// requests sent in each: the throughput and latency whose drift tells an
// unsteady point.
type seconds []second

type second struct {
	tokens    float64
	completed int
	ttft      record.Histogram
}

// at returns the second holding t, a time in the window w starting at
// start and ending at end; nil outside it.
func (ss *seconds) at(start, end, t time.Time) *second {
	if t.Before(start) || !t.Before(end) {
		return nil
	}
	i := int(t.Sub(start) / time.Second)
	for len(*ss) <= i {
		*ss = append(*ss, second{})
	}
	return &(*ss)[i]
}

// add counts r into the seconds of the window [start, end).
func (ss *seconds) add(start, end time.Time, r *Result) {
	if !r.OK() {
		return
	}
	if n := len(r.Chunks); n > 0 {
		each := float64(r.OutputTokens) / float64(n)
		for _, c := range r.Chunks {
			if s := ss.at(start, end, r.Sent.Add(c)); s != nil {
				s.tokens += each
			}
		}
	}
	if s := ss.at(start, end, r.Sent.Add(r.E2EL())); s != nil {
		s.completed++
	}
	if s := ss.at(start, end, r.Sent); s != nil && len(r.Chunks) > 0 {
		s.ttft.Record(r.TTFT())
	}
}

// record renders the whole seconds of a window of that length.
func (ss seconds) record(window time.Duration) []record.LLMSecond {
	n := int(window / time.Second)
	if n == 0 {
		return nil
	}
	out := make([]record.LLMSecond, n)
	for i := range out {
		out[i].At = record.Duration(time.Duration(i) * time.Second)
		if i < len(ss) {
			s := &ss[i]
			out[i].Tokens = record.Round3(s.tokens)
			out[i].Completed = s.completed
			out[i].TTFTP50 = record.Duration(s.ttft.Quantile(0.5))
			out[i].TTFTP99 = record.Duration(s.ttft.Quantile(0.99))
		}
	}
	return out
}

// Tokens returns the output tokens received in each whole second of l's
// window: its throughput second by second.
func Tokens(l *record.LLM) []float64 {
	out := make([]float64, len(l.Seconds))
	for i, s := range l.Seconds {
		out[i] = s.Tokens
	}
	return out
}
