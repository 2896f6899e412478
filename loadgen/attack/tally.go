package attack

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// Status keys beyond HTTP codes.
const (
	// StatusError counts requests that got no HTTP answer (refused,
	// reset, timed out).
	StatusError = "error"
	// StatusInvalid counts 200 answers whose body failed the check (not
	// one output per item sent).
	StatusInvalid = "invalid"
)

// Outcome is one request, classified.
type Outcome struct {
	Sent time.Time
	// intended is when the open loop's schedule meant the request to go
	// (zero in closed loop); Sent − intended is its schedule lag.
	intended time.Time
	Latency  time.Duration
	Status   string       // "200", "429", StatusError, StatusInvalid
	ErrText  string       // for failures; printable
	Timing   ServerTiming // when Timed: its answer had a Server-Timing header
	Timed    bool
	carrier  bool // it carried the payload's injected text
}

// OK reports whether the request succeeded.
func (o *Outcome) OK() bool { return o.Status == "200" }

// lag returns how late the request went out against the schedule, and
// false when it had none.
func (o *Outcome) lag() (time.Duration, bool) {
	if o.intended.IsZero() {
		return 0, false
	}
	return max(o.Sent.Sub(o.intended), 0), true
}

// Tally accumulates the outcomes of a measured window. The zero value is
// empty and usable.
type Tally struct {
	sent, ok int
	hist     record.Histogram // latency of successful requests from their actual send
	// In open loop: the schedule lag of every request, and the latency of
	// successful ones from their intended send time.
	lag, fromSchedule record.Histogram
	status            map[string]int
	errors            map[string]int
	timed             int
	queue             time.Duration
	compute           time.Duration
	batchItems        int     // Σ batch size over timed responses
	batchShare        float64 // Σ 1/batch size over them: the batches they make up, per item of a request
	padded            int     // timed responses that carried a padding
	padding           float64 // their padding, summed
	// Requests that carried the injected text, and the model's failures
	// (500) on either side.
	carriers, carriers500, others500 int
}

// Add counts o.
func (t *Tally) Add(o *Outcome) {
	t.sent++
	if t.status == nil {
		t.status = make(map[string]int)
	}
	t.status[o.Status]++
	if o.carrier {
		t.carriers++
	}
	switch {
	case o.Status == "500" && o.carrier:
		t.carriers500++
	case o.Status == "500":
		t.others500++
	}
	lag, scheduled := o.lag()
	if scheduled {
		t.lag.Record(lag)
	}
	if !o.OK() {
		t.errors = record.CountError(t.errors, o.ErrText, 1)
		return
	}
	t.ok++
	t.hist.Record(o.Latency)
	if scheduled {
		t.fromSchedule.Record(lag + o.Latency)
	}
	if o.Timed {
		t.timed++
		t.queue += o.Timing.Queue
		t.compute += o.Timing.Compute
		t.batchItems += o.Timing.Batch
		if o.Timing.Batch > 0 {
			t.batchShare += 1 / float64(o.Timing.Batch)
		}
		if o.Timing.Pad > 0 {
			t.padded++
			t.padding += o.Timing.Pad
		}
	}
}

// Merge adds o's outcomes to t.
func (t *Tally) Merge(o *Tally) {
	t.sent += o.sent
	t.ok += o.ok
	t.hist.Merge(&o.hist)
	t.lag.Merge(&o.lag)
	t.fromSchedule.Merge(&o.fromSchedule)
	if len(o.status) > 0 && t.status == nil {
		t.status = make(map[string]int)
	}
	for k, v := range o.status {
		t.status[k] += v
	}
	for k, v := range o.errors {
		t.errors = record.CountError(t.errors, k, v)
	}
	t.timed += o.timed
	t.queue += o.queue
	t.compute += o.compute
	t.batchItems += o.batchItems
	t.batchShare += o.batchShare
	t.padded += o.padded
	t.padding += o.padding
	t.carriers += o.carriers
	t.carriers500 += o.carriers500
	t.others500 += o.others500
}

// Sent is the number of requests counted.
func (t *Tally) Sent() int { return t.sent }

// OK is the number of successful requests.
func (t *Tally) OK() int { return t.ok }

// Timed is the number of successful answers with a Server-Timing header.
func (t *Tally) Timed() int { return t.timed }

// Latency is the latency distribution of the successful requests, from
// their actual send.
func (t *Tally) Latency() *record.Histogram { return &t.hist }

// Lag is the open loop's schedule lag distribution of every request.
func (t *Tally) Lag() *record.Histogram { return &t.lag }

// ServerSide returns the means of the Server-Timing headers seen.
func (t *Tally) ServerSide() record.ServerSide {
	if t.timed == 0 {
		return record.ServerSide{}
	}
	n := time.Duration(t.timed)
	s := record.ServerSide{
		ResponseBatch: float64(t.batchItems) / float64(t.timed),
		MeanQueue:     record.Duration(t.queue / n),
		MeanCompute:   record.Duration(t.compute / n),
		Timed:         t.timed,
	}
	if t.batchShare > 0 {
		// Every request carries the same number of items, so the
		// batches the responses ran in number Σ 1/batch per item.
		s.Batch = float64(t.timed) / t.batchShare
	}
	if t.padded > 0 {
		s.MeanPadding = t.padding / float64(t.padded)
	}
	return s
}

// Injected returns how the requests carrying text fared apart from the
// others.
func (t *Tally) Injected(text string) *record.Injected {
	return &record.Injected{
		Text: text, Sent: t.carriers, ModelFailed: t.carriers500,
		OthersSent: t.sent - t.carriers, OthersModelFailed: t.others500,
	}
}

// Record returns the record of a point whose measured windows, window
// long in all, sent the requests t holds and received answered successful
// answers, each request carrying items items. The caller adds what its
// probes measured (CPU, /metrics), the repeats and the validity flags.
func (t *Tally) Record(pt record.Point, start time.Time, window time.Duration, answered, items int) *record.Record {
	secs := window.Seconds()
	rec := &record.Record{
		Point:        pt,
		Start:        start,
		Duration:     record.Duration(window),
		Sent:         t.sent,
		AchievedRate: float64(t.sent) / secs,
		Throughput:   float64(answered) / secs,
		ItemsPerSec:  float64(answered*items) / secs,
		Latency:      t.hist.Percentiles(),
		Histogram:    &t.hist,
		ScheduleLag:  percentiles(&t.lag),
		FromSchedule: percentiles(&t.fromSchedule),
		Status:       maps.Clone(t.status),
		Errors:       maps.Clone(t.errors),
		Server:       t.ServerSide(),
	}
	if pt.Load.Mode == "open" {
		rec.TargetRate = pt.Load.Rate
		if pt.Load.Pacer == "ramp" {
			rec.TargetRate = (pt.Load.RampFrom + pt.Load.Rate) / 2
		}
	}
	return rec
}

// percentiles returns h's percentiles, or nil when h is empty.
func percentiles(h *record.Histogram) *record.Percentiles {
	if h.Count() == 0 {
		return nil
	}
	p := h.Percentiles()
	return &p
}

// Timeline buckets a window's outcomes by the second they were sent in.
type Timeline []second

type second struct {
	sent, ok int
	hist     record.Histogram
	maxLag   time.Duration
	answered int // successful answers received in the second, whenever sent
}

// add counts o, sent at from the window's start.
func (tl *Timeline) add(at time.Duration, o *Outcome) {
	i := int(at / time.Second)
	for len(*tl) <= i {
		*tl = append(*tl, second{})
	}
	s := &(*tl)[i]
	s.sent++
	if lag, ok := o.lag(); ok {
		s.maxLag = max(s.maxLag, lag)
	}
	if o.OK() {
		s.ok++
		s.hist.Record(o.Latency)
	}
}

// TargetRate is an open loop's rate t into the measured window (negative
// t: in the warm-up); 0 for closed loop.
func TargetRate(l record.Load, t, duration time.Duration) float64 {
	switch {
	case l.Mode != "open":
		return 0
	case l.Pacer != "ramp":
		return l.Rate
	case t <= 0:
		return l.RampFrom
	case t >= duration:
		return l.Rate
	default:
		return l.RampFrom + (l.Rate-l.RampFrom)*t.Seconds()/duration.Seconds()
	}
}

// Ticks renders the timeline of a window of the given load and duration.
func (tl Timeline) Ticks(load record.Load, duration time.Duration) []record.Tick {
	out := make([]record.Tick, len(tl))
	for i := range tl {
		at := time.Duration(i) * time.Second
		out[i] = record.Tick{
			At:     record.Duration(at),
			Target: TargetRate(load, at+time.Second/2, duration),
			Sent:   tl[i].sent,
			OK:     tl[i].ok,
			P50:    record.Duration(tl[i].hist.Quantile(0.5)),
			P99:    record.Duration(tl[i].hist.Quantile(0.99)),
			MaxLag: record.Duration(tl[i].maxLag),

			Answered: tl[i].answered,
		}
	}
	return out
}

// classify turns a raw answer into an outcome: transport errors, HTTP
// statuses with the server's error code, and 200s whose body fails check.
// Its error text is printable.
func classify(code int, errText string, body []byte, timing string, check func([]byte) error) Outcome {
	o := classifyRaw(code, errText, body, timing, check)
	o.ErrText = record.Printable(o.ErrText)
	return o
}

func classifyRaw(code int, errText string, body []byte, timing string, check func([]byte) error) Outcome {
	o := Outcome{Status: strconv.Itoa(code)}
	switch {
	case code == 0:
		o.Status = StatusError
		o.ErrText = trimRequestPrefix(errText)
	case code != 200:
		o.ErrText = "HTTP " + o.Status
		if c := target.ErrorCode(body); c != "" {
			o.ErrText += " " + c
		}
	default:
		if err := check(body); err != nil {
			o.Status = StatusInvalid
			o.ErrText = err.Error()
			return o
		}
		o.Timing, o.Timed = parseServerTiming(timing)
	}
	return o
}

// trimRequestPrefix drops the `Post "http://…": ` that Go's client puts
// before transport errors, so that errors group across targets.
func trimRequestPrefix(s string) string {
	if strings.HasPrefix(s, "Post \"") {
		if i := strings.Index(s, "\": "); i > 0 {
			return s[i+3:]
		}
	}
	return s
}
