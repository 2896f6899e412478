package loadgen

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/inferhq/infer/loadgen/record"
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

// outcome is one request, classified.
type outcome struct {
	sent time.Time
	// intended is when the open loop's schedule meant the request to go
	// (zero in closed loop); sent − intended is its schedule lag.
	intended time.Time
	latency  time.Duration
	status   string // "200", "429", StatusError, StatusInvalid
	errText  string // for failures
	timing   serverTiming
	timed    bool
	carrier  bool // it carried the payload's injected text
}

// ok reports whether the request succeeded.
func (o *outcome) ok() bool { return o.status == "200" }

// lag returns how late the request went out against the schedule, and
// false when it had none.
func (o *outcome) lag() (time.Duration, bool) {
	if o.intended.IsZero() {
		return 0, false
	}
	return max(o.sent.Sub(o.intended), 0), true
}

// tally accumulates the outcomes of a measured window. The zero value is
// empty and usable.
type tally struct {
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

func (t *tally) add(o *outcome) {
	t.sent++
	if t.status == nil {
		t.status = make(map[string]int)
	}
	t.status[o.status]++
	if o.carrier {
		t.carriers++
	}
	switch {
	case o.status == "500" && o.carrier:
		t.carriers500++
	case o.status == "500":
		t.others500++
	}
	lag, scheduled := o.lag()
	if scheduled {
		t.lag.Record(lag)
	}
	if !o.ok() {
		t.errors = record.CountError(t.errors, o.errText, 1)
		return
	}
	t.ok++
	t.hist.Record(o.latency)
	if scheduled {
		t.fromSchedule.Record(lag + o.latency)
	}
	if o.timed {
		t.timed++
		t.queue += o.timing.queue
		t.compute += o.timing.compute
		t.batchItems += o.timing.batch
		if o.timing.batch > 0 {
			t.batchShare += 1 / float64(o.timing.batch)
		}
		if o.timing.pad > 0 {
			t.padded++
			t.padding += o.timing.pad
		}
	}
}

func (t *tally) merge(o *tally) {
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

// serverSide returns the means of the Server-Timing headers seen.
func (t *tally) serverSide() record.ServerSide {
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

// injected returns how the requests carrying text fared apart from the
// others.
func (t *tally) injected(text string) *record.Injected {
	return &record.Injected{
		Text: text, Sent: t.carriers, ModelFailed: t.carriers500,
		OthersSent: t.sent - t.carriers, OthersModelFailed: t.others500,
	}
}

// timeline buckets a window's outcomes by the second they were sent in.
type timeline []second

type second struct {
	sent, ok int
	hist     record.Histogram
	maxLag   time.Duration
}

// add counts o, sent at from the window's start.
func (tl *timeline) add(at time.Duration, o *outcome) {
	i := int(at / time.Second)
	for len(*tl) <= i {
		*tl = append(*tl, second{})
	}
	s := &(*tl)[i]
	s.sent++
	if lag, ok := o.lag(); ok {
		s.maxLag = max(s.maxLag, lag)
	}
	if o.ok() {
		s.ok++
		s.hist.Record(o.latency)
	}
}

// ticks renders the timeline of a window of the given load and duration.
func (tl timeline) ticks(load record.Load, duration time.Duration) []record.Tick {
	out := make([]record.Tick, len(tl))
	for i := range tl {
		at := time.Duration(i) * time.Second
		out[i] = record.Tick{
			At:     record.Duration(at),
			Target: targetRate(load, at+time.Second/2, duration),
			Sent:   tl[i].sent,
			OK:     tl[i].ok,
			P50:    record.Duration(tl[i].hist.Quantile(0.5)),
			P99:    record.Duration(tl[i].hist.Quantile(0.99)),
			MaxLag: record.Duration(tl[i].maxLag),
		}
	}
	return out
}

// maxText bounds the runes kept of a text that came from a server.
const maxText = 200

// printable returns s with its control characters (terminal escapes among
// them) replaced by '?', cut to maxText runes: what a server sends ends up
// on terminals and in files.
func printable(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == maxText {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// classify turns a raw answer into an outcome: transport errors, HTTP
// statuses with the server's error code, and 200s whose body fails check.
// Its error text is printable.
func classify(code int, errText string, body []byte, timing string, check func([]byte) error) outcome {
	o := classifyRaw(code, errText, body, timing, check)
	o.errText = printable(o.errText)
	return o
}

func classifyRaw(code int, errText string, body []byte, timing string, check func([]byte) error) outcome {
	o := outcome{status: strconv.Itoa(code)}
	switch {
	case code == 0:
		o.status = StatusError
		o.errText = trimRequestPrefix(errText)
	case code != 200:
		o.errText = "HTTP " + o.status
		if c := errorCode(body); c != "" {
			o.errText += " " + c
		}
	default:
		if err := check(body); err != nil {
			o.status = StatusInvalid
			o.errText = err.Error()
			return o
		}
		o.timing, o.timed = parseServerTiming(timing)
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

// errorCode returns the code of an infer error body ({"error": {"code":
// …}}) or the message of a KServe v2 one ({"error": "…"}), if short.
func errorCode(body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return ""
	}
	var obj struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(e.Error, &obj) == nil && obj.Code != "" {
		return obj.Code
	}
	var msg string
	if json.Unmarshal(e.Error, &msg) == nil && len(msg) <= 80 {
		return msg
	}
	return ""
}

// copyCounts returns a copy of m (nil stays nil).
func copyCounts(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	return maps.Clone(m)
}
