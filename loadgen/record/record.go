// Package record is the schema of a bench run's results: the manifest of a
// run, one Record per sweep point, and a latency Histogram that keeps enough
// of the distribution to recompute percentiles and compare runs later. It is
// what `infer bench` writes and `infer report` reads; it has no dependencies
// beyond the standard library.
package record

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// File names inside a run directory.
const (
	ManifestFile = "manifest.json"
	ResultsFile  = "results.jsonl"
)

// Manifest describes a whole run.
type Manifest struct {
	Scenario     string    `json:"scenario"`      // scenario name
	ScenarioFile string    `json:"scenario_file"` // path it was read from
	ScenarioYAML string    `json:"scenario_yaml"` // the file's text, verbatim
	InferVersion string    `json:"infer_version"`
	InferCommit  string    `json:"infer_commit"`
	Model        string    `json:"model,omitempty"`      // model served, when infer started the server
	ModelHash    string    `json:"model_hash,omitempty"` // sha256 of the model file, when there is one
	Runtime      string    `json:"runtime,omitempty"`    // e.g. "onnxruntime 1.30.0"
	Cores        int       `json:"cores"`
	GoVersion    string    `json:"go_version"`
	OS           string    `json:"os"` // GOOS/GOARCH
	Host         string    `json:"host,omitempty"`
	Start        time.Time `json:"start"`
	End          time.Time `json:"end,omitzero"`
	// Offline is the model's own ceiling without HTTP, items per second by
	// batch size, when known (from `infer models bench`).
	Offline map[int]float64 `json:"offline,omitempty"`
	// SLO holds the scenario's thresholds, for the report's verdicts.
	SLO SLO `json:"slo,omitzero"`
	// Interrupted is set when the run was stopped before its last point.
	Interrupted bool `json:"interrupted,omitempty"`
	// Notices are what the run found missing or assumed (no /metrics, no
	// Server-Timing, answers checked by their status only…), each once.
	Notices []string `json:"notices,omitempty"`
	// Capacities are the capacity searches' findings (load.search), one
	// per configuration; the same can be had from the records (Capacities).
	Capacities []Capacity `json:"capacities,omitempty"`
	// Accuracy says, for each model of a sweep of models (sweep.model)
	// but the first, how closely its outputs follow the first model's, as
	// infer bench measured it after the sweep (ModelRow.Accuracy).
	Accuracy map[string]string `json:"accuracy,omitempty"`
}

// SLO thresholds; a zero field is not checked.
type SLO struct {
	P99           Duration `json:"p99,omitzero"`            // p99 latency at most
	MaxErrorRate  float64  `json:"max_error_rate,omitzero"` // failed / sent at most (0.01 = 1 %)
	MinThroughput float64  `json:"min_throughput,omitzero"` // successful requests per second at least
	// The thresholds of streaming LLM points (LLMSLO): p99 TTFT, TPOT and
	// E2EL at most (each also a per-request bound for goodput), goodput
	// at least.
	TTFTP99    Duration `json:"ttft_p99,omitzero"`
	TPOTP99    Duration `json:"tpot_p99,omitzero"`
	E2ELP99    Duration `json:"e2el_p99,omitzero"`
	MinGoodput float64  `json:"min_goodput,omitzero"`
	// MinGoodputFraction: the share of good requests at least
	// (LLM.GoodFraction).
	MinGoodputFraction float64 `json:"min_goodput_fraction,omitzero"`
}

// LLM returns the thresholds of LLM points.
func (s SLO) LLM() LLMSLO {
	return LLMSLO{TTFT: s.TTFTP99, TPOT: s.TPOTP99, E2EL: s.E2ELP99, MinGoodput: s.MinGoodput, MinGoodFraction: s.MinGoodputFraction}
}

// Point is the configuration of one sweep point.
type Point struct {
	Name     string   `json:"name"`              // human label, e.g. "batched b=64 w=2 rate=400"
	Model    string   `json:"model,omitempty"`   // the model of the server infer started, when the sweep set it
	Endpoint string   `json:"endpoint"`          // "naive", "batched", "v2", or a URL path
	Targets  []string `json:"targets"`           // URLs the load was sent to
	Batch    int      `json:"batch,omitempty"`   // server --batch, when infer started or configured it
	Workers  int      `json:"workers,omitempty"` // server --workers
	Latency  Duration `json:"max_latency,omitzero"`
	Policy   string   `json:"policy,omitempty"`
	// Buckets are the server's --buckets (token-length bucket bounds), when
	// the sweep set them; nil: none.
	Buckets []int `json:"buckets,omitempty"`
	// MaxSeqs and MaxBatchedTokens are a generation server's --max-seqs
	// and --max-batched-tokens (LLM points), when infer started or
	// configured it, or as its /metrics said.
	MaxSeqs          int `json:"max_seqs,omitempty"`
	MaxBatchedTokens int `json:"max_batched_tokens,omitempty"`
	// RoutePolicy is the policy of the infer route that infer bench
	// started in front of the replicas (server.replicas), when it did.
	RoutePolicy string `json:"route_policy,omitempty"`
	Load        Load   `json:"load"`
	Items       int    `json:"items_per_request"` // items in each request body
	// Expect is how 200 answers were checked: "status" (any body),
	// "infer" (one output per item) or "kserve" (a KServe v2 answer).
	Expect string `json:"expect,omitempty"`

	// PrefixCache is a generation server's --prefix-cache, when the
	// sweep set it.
	PrefixCache *bool `json:"prefix_cache,omitempty"`
}

// Load is how the generator drove one point.
type Load struct {
	Mode        string  `json:"mode"`                  // "open" (paced rate) or "closed" (fixed concurrency)
	Pacer       string  `json:"pacer,omitempty"`       // open loop: "constant" or "ramp"
	Rate        float64 `json:"rate,omitempty"`        // open loop: target requests/s (the ramp's end for "ramp")
	RampFrom    float64 `json:"ramp_from,omitempty"`   // ramp: starting requests/s
	Concurrency int     `json:"concurrency,omitempty"` // closed loop: clients
	// Arrival is an LLM open loop's arrival process: "poisson" or "gamma"
	// (of shape Burstiness), "trace" (a trace replay's timestamps, Rate
	// their mean); "" for constant gaps.
	Arrival    string  `json:"arrival,omitempty"`
	Burstiness float64 `json:"burstiness,omitempty"`
}

// Nominal is the open loop's level: its rate, a ramp's mean; 0 in closed
// loop.
func (l Load) Nominal() float64 {
	switch {
	case l.Mode == "closed":
		return 0
	case l.Pacer == "ramp":
		return (l.RampFrom + l.Rate) / 2
	}
	return l.Rate
}

// DrawnRate returns the rate a random schedule's draws came to in the
// measured time (TargetRate), and whether it differs enough from the
// nominal level (more than 0.5 %) to be shown beside it.
func (r *Record) DrawnRate() (float64, bool) {
	n := r.Point.Load.Nominal()
	return r.TargetRate, n > 0 && r.TargetRate > 0 && math.Abs(r.TargetRate/n-1) > 0.005
}

// Record is the result of one sweep point, over all its repeats.
type Record struct {
	Index    int       `json:"index"` // position in the sweep, from 0
	Point    Point     `json:"point"`
	Start    time.Time `json:"start"`
	Duration Duration  `json:"duration"` // measured time, warm-up excluded, summed over repeats

	Sent int `json:"sent"` // requests sent in the measured time
	// TargetRate is the requests/s the schedule asked for in the measured
	// time (open loop; 0 in closed loop): the level's rate (a ramp's
	// mean), or with random arrivals the rate the draws came to
	// (DrawnRate), beside point.load.rate, the nominal level.
	TargetRate   float64 `json:"target_rate"`
	AchievedRate float64 `json:"achieved_rate"` // requests/s actually sent
	// Throughput is the successful answers received per second in the
	// measured time, whenever their requests were sent: the server's real
	// rate, also when an overloaded server lags what was sent.
	Throughput  float64 `json:"throughput"`
	ItemsPerSec float64 `json:"items_per_sec"` // successful items/s, likewise

	// Latency is the service time of successful requests: from their
	// actual send to their answer.
	Latency Percentiles `json:"latency"`
	// FromSchedule is the latency of successful requests measured from
	// their intended send time instead (wrk2's correction for coordinated
	// omission): what clients who sent on the open loop's schedule waited,
	// including the time sending fell behind it. nil in closed loop.
	FromSchedule *Percentiles `json:"latency_from_schedule,omitempty"`
	// ScheduleLag is how late requests went out against the open loop's
	// schedule (actual − intended send time), over every request sent in
	// the measured time. nil in closed loop, which has no schedule.
	ScheduleLag *Percentiles `json:"schedule_lag,omitempty"`

	Histogram *Histogram     `json:"histogram,omitempty"` // service times of successful requests
	Status    map[string]int `json:"status"`              // HTTP status (or "error") → count
	Errors    map[string]int `json:"errors,omitempty"`    // transport/check error text → count

	Server ServerSide `json:"server"`

	Repeats []Repeat `json:"repeats,omitempty"` // one per repeat, when more than one

	// Valid is false when a flag makes the point's numbers untrustworthy.
	Valid bool     `json:"valid"`
	Flags []string `json:"flags,omitempty"`
	// Partial is set when the point was cut short (the user stopped the run).
	Partial bool `json:"partial,omitempty"`
	// GeneratorCPU is the load generator's CPU use during the point, in
	// cores (1.0 = one core busy).
	GeneratorCPU float64 `json:"generator_cpu"`
	// Injected counts the requests that carried the payload's injected
	// text (payload.inject) apart from the others; nil without injection.
	Injected *Injected `json:"injected,omitempty"`
	// Timeline is the first repeat's measured window second by second,
	// by send time: how a ramp or an overload unfolded.
	Timeline []Tick `json:"timeline,omitempty"`
	// LLM holds what a streaming LLM point measured (TTFT, TPOT, ITL,
	// tokens/s, goodput…); nil for other points. Such a record's Latency
	// and Histogram are the requests' E2EL, and Throughput (and
	// ItemsPerSec) their completions per second.
	LLM *LLM `json:"llm,omitempty"`
	// Search is set on a probe of a capacity search (load.search): its
	// level's verdict and the search's bracket after it.
	Search *Search `json:"search,omitempty"`
}

// Injected is how the requests carrying an injected text (a fault the
// server is told to fail on, like `infer serve --sim-fail-on`) fared apart
// from the others: with per-item error isolation the model fails (HTTP
// 500) only the carriers. Other statuses (429, 504) are admission and
// deadline outcomes, in Record.Status.
type Injected struct {
	Text              string `json:"text"`
	Sent              int    `json:"sent"`                // requests carrying Text
	ModelFailed       int    `json:"model_failed"`        // of which got 500
	OthersSent        int    `json:"others_sent"`         // requests without Text
	OthersModelFailed int    `json:"others_model_failed"` // of which got 500: 0 with isolation
}

// Tick is one second of a point's measured window.
type Tick struct {
	At     Duration `json:"at"`               // start of the second, from the window's start
	Target float64  `json:"target,omitempty"` // open loop: the target rate at that second's middle
	Sent   int      `json:"sent"`             // requests sent in that second
	OK     int      `json:"ok"`               // of which succeeded
	P50    Duration `json:"p50,omitzero"`     // latency of the successful ones
	P99    Duration `json:"p99,omitzero"`
	MaxLag Duration `json:"max_lag,omitzero"` // open loop: the latest send against the schedule

	// Answered counts the successful answers received in that second,
	// whenever sent: the throughput second by second.
	Answered int `json:"answered,omitempty"`
}

// Validity flags.
const (
	// FlagCoordinatedOmission: an open-loop point achieved less than 95 % of
	// its target rate, so the server slowed the generator down and the
	// latencies under-state what clients at that rate would see.
	FlagCoordinatedOmission = "coordinated-omission"
	// FlagScheduleLag: an open-loop point whose requests went out late
	// against the schedule enough to move its p99 (measured from the
	// intended send times, the p99 passes the service time's by more than
	// 10 % and 10 ms), as when a stall holds sending back at
	// load.max_in_flight and a burst catches up afterwards. The average
	// rate may look right, but the service times (Latency) understate
	// what clients on schedule saw: read FromSchedule.
	FlagScheduleLag = "schedule-lag"
	// FlagGeneratorSaturated: the load generator used (nearly) all the CPU it
	// could; the server may have been faster than measured.
	FlagGeneratorSaturated = "generator-saturated"
	// FlagErrors: some requests failed.
	FlagErrors = "errors"
	// FlagNoSuccess: no request succeeded; latencies are meaningless.
	FlagNoSuccess = "no-success"
)

// MaxErrorKinds bounds the distinct error texts a record keeps (Errors);
// the requests failing with any other text count under "other errors".
const MaxErrorKinds = 20

// CountError adds n requests that failed with text to errs, which it
// allocates when nil, keeping at most MaxErrorKinds texts, and returns errs.
// An empty text counts nothing.
func CountError(errs map[string]int, text string, n int) map[string]int {
	if text == "" {
		return errs
	}
	if errs == nil {
		errs = make(map[string]int)
	}
	if _, ok := errs[text]; !ok && len(errs) >= MaxErrorKinds {
		text = "other errors"
	}
	errs[text] += n
	return errs
}

// maxText bounds the runes Printable keeps of a text.
const maxText = 200

// Printable returns s with its control characters (terminal escapes among
// them) replaced by '?', cut to 200 runes: what a server sends ends up on
// terminals and in files.
func Printable(s string) string {
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

// Round3 rounds v to three decimals, as records keep their figures in
// milliseconds (to the microsecond) and rates.
func Round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }

// Percentiles of a latency distribution.
type Percentiles struct {
	Mean Duration `json:"mean"`
	P50  Duration `json:"p50"`
	P90  Duration `json:"p90"`
	P99  Duration `json:"p99"`
	P999 Duration `json:"p999"`
	Max  Duration `json:"max"`
}

// ServerSide is what the server said about the point: from Server-Timing
// headers of successful responses and from /metrics where reachable.
//
// A mean batch size can be weighted two ways. Counting each batch once
// (items ÷ batches, what /metrics gives) is Record.MeanBatch. Counting each
// response once is ResponseBatch: when batches alternate 1 and 31 items,
// 31 responses say 31 and one says 1, so ResponseBatch reads 30.1 where
// the batches held 16 items on average.
type ServerSide struct {
	// Batch is the mean batch size with each batch counted once, from
	// Server-Timing: the harmonic mean of the batch size each response
	// ran in (a batch of b items answers b / items-per-request requests).
	Batch float64 `json:"batch,omitempty"`
	// ResponseBatch is the batch size a response ran in, mean over the
	// responses (weighted by response, so above Batch when sizes vary).
	ResponseBatch float64  `json:"response_batch,omitempty"`
	MeanQueue     Duration `json:"mean_queue,omitzero"`   // queue time, mean over responses
	MeanCompute   Duration `json:"mean_compute,omitzero"` // compute time, mean over responses
	Timed         int      `json:"timed,omitempty"`       // responses that carried Server-Timing
	// MeanPadding is the padding of the batches responses ran in (batch
	// size × longest item ÷ real tokens; 1 = none), mean over the
	// responses whose Server-Timing carried it (token models only).
	MeanPadding float64  `json:"mean_padding,omitempty"`
	Metrics     *Metrics `json:"metrics,omitempty"`     // /metrics deltas over the point
	CPUSeconds  float64  `json:"cpu_seconds,omitempty"` // server process CPU over the point, when known (the router's, in front of server.replicas)
	RSSBytes    int64    `json:"rss_bytes,omitempty"`   // server resident memory at the end, when known
}

// UnmarshalJSON reads records written before response_batch had its name,
// whose mean_batch was the response-weighted figure.
func (s *ServerSide) UnmarshalJSON(b []byte) error {
	type plain ServerSide
	var v struct {
		plain
		Legacy *float64 `json:"mean_batch"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = ServerSide(v.plain)
	if v.Legacy != nil && s.ResponseBatch == 0 {
		s.ResponseBatch = *v.Legacy
	}
	return nil
}

// Metrics are deltas of the server's Prometheus metrics over a point.
type Metrics struct {
	Batches   float64  `json:"batches"`
	Items     float64  `json:"items"`
	MeanBatch float64  `json:"mean_batch"` // Items ÷ Batches: each batch counted once
	MeanQueue Duration `json:"mean_queue"`
	Dropped   float64  `json:"dropped,omitempty"`
}

// Repeat is one repeat of a point.
type Repeat struct {
	Throughput   float64  `json:"throughput"`
	AchievedRate float64  `json:"achieved_rate"`
	P50          Duration `json:"p50"`
	P99          Duration `json:"p99"`
	// LLM points: output tokens per second and the p99 TTFT.
	OutputTokensPerS float64  `json:"output_tokens_per_s,omitempty"`
	TTFTP99          Duration `json:"ttft_p99,omitzero"`
}

// Spread returns the smallest and largest throughput over the repeats, or
// the record's own throughput twice when there are none.
func (r *Record) Spread() (lo, hi float64) {
	if len(r.Repeats) == 0 {
		return r.Throughput, r.Throughput
	}
	lo, hi = r.Repeats[0].Throughput, r.Repeats[0].Throughput
	for _, rp := range r.Repeats[1:] {
		lo, hi = min(lo, rp.Throughput), max(hi, rp.Throughput)
	}
	return lo, hi
}

// Caveats lists why r's figures cannot be taken at face value, for tables
// and verdicts: "partial" when the point was cut short, then every flag
// but FlagErrors (failed requests are an outcome the record measures, not
// a doubt about its figures) and FlagSearch, or "not valid" for an
// invalid record without flags. It is empty for a point whose figures
// stand.
func (r *Record) Caveats() []string {
	var c []string
	if r.Partial {
		c = append(c, "partial")
	}
	for _, f := range r.Flags {
		if f != FlagErrors && f != FlagSearch {
			c = append(c, f)
		}
	}
	if len(c) == 0 && !r.Valid {
		c = append(c, "not valid")
	}
	return c
}

// MeanBatch is the server's mean batch size with each batch counted once:
// items ÷ batches from /metrics when they were counted, else the same from
// Server-Timing (ServerSide.Batch); 0 when unknown. ServerSide's
// ResponseBatch is the response-weighted figure.
func (r *Record) MeanBatch() float64 {
	if m := r.Server.Metrics; m != nil && m.Batches > 0 {
		return m.MeanBatch
	}
	return r.Server.Batch
}

// ErrorRate is the share of sent requests that did not succeed: for an
// LLM point, of its window's requests that ended (a stream that broke off
// after a 200 failed too).
func (r *Record) ErrorRate() float64 {
	if l := r.LLM; l != nil {
		if l.Requests == 0 {
			return 0
		}
		return float64(l.Failed) / float64(l.Requests)
	}
	if r.Sent == 0 {
		return 0
	}
	ok := r.Status["200"]
	return float64(r.Sent-ok) / float64(r.Sent)
}

// Duration is a time.Duration that encodes in JSON as a string like "1.5ms"
// and decodes from such a string or from a number of nanoseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Ms returns d in milliseconds.
func (d Duration) Ms() float64 { return float64(d) / 1e6 }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a string like \"1.5ms\" or nanoseconds, got %s", b)
	}
	*d = Duration(n)
	return nil
}

// WriteManifest writes m into dir.
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644)
}

// Writer appends records to a results.jsonl file, one JSON object a line,
// flushed after each so that a run cut short keeps its finished points.
type Writer struct {
	f *os.File
}

// Create opens dir/results.jsonl for appending records.
func Create(dir string) (*Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, ResultsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write appends r.
func (w *Writer) Write(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Run is a run directory read back.
type Run struct {
	Dir      string
	Manifest Manifest
	Records  []Record
}

// ReadRun reads a run directory. A missing manifest is tolerated (the zero
// Manifest is returned), as is a truncated last line of results (a run
// killed mid-write); any other malformed line is an error naming its line.
func ReadRun(dir string) (*Run, error) {
	run := &Run{Dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, ManifestFile)); err == nil {
		if err := json.Unmarshal(b, &run.Manifest); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, ResultsFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ResultsFile), err)
	}
	run.Records = recs
	return run, nil
}

// Read decodes JSON-lines records. A malformed final line without a newline
// is ignored as a write cut short.
func Read(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	var recs []Record
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 && !(len(b) == 1 && b[0] == '\n') {
			var rec Record
			if jerr := json.Unmarshal(b, &rec); jerr != nil {
				if err == io.EOF { // last line, no newline: cut short
					return recs, nil
				}
				return nil, fmt.Errorf("line %d: %w", line, jerr)
			}
			recs = append(recs, rec)
		}
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
