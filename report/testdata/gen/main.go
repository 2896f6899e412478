// Command gen writes the report package's fixture runs: bench results as
// `infer bench` would record them, produced by a seeded discrete-event
// simulation of the server (the batcher's close-at-size-or-deadline rule, N
// workers, a bounded queue answering 429, an open-loop generator with a cap
// on requests in flight). Rerun it after changing the record schema:
//
//	go run ./report/testdata/gen -out report/testdata
//
// The output is the same on every run.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

func main() {
	out := flag.String("out", "report/testdata", "folder to write the fixture runs into")
	flag.Parse()
	if err := write(*out); err != nil {
		log.Fatal(err)
	}
}

// cost is a model's time for a batch of n items: (fixed + perItem·n) times a
// contention factor for w workers sharing the machine, with a little noise.
type cost struct {
	fixed, perItem time.Duration
	contention     float64 // added per extra worker: 0.35 = each extra worker slows all by 35 %
	jitter         float64 // relative standard deviation
}

func (c cost) of(rng *rand.Rand, n, w int, slow float64) time.Duration {
	d := float64(c.fixed+time.Duration(n)*c.perItem) * (1 + c.contention*float64(w-1)) * slow
	return time.Duration(d * math.Exp(rng.NormFloat64()*c.jitter))
}

// server is one sweep point's server: batch size, workers, max latency, and
// queue capacity in items. The naive endpoint is batch 1, one worker, no wait.
//
// Without a policy a batch closes at its size or deadline and then waits,
// as it is, for a worker. With one, the batch is an open slab as in
// server/batch: the policy says when it is ready (fixed: at its deadline;
// immediate: at once; adaptive: at its target size or deadline), and it
// keeps growing, up to its size, until a worker takes it.
type server struct {
	batch, workers int
	maxLatency     time.Duration
	queueCap       int
	policy         string
}

// outcome is one repeat of a point.
type outcome struct {
	sent, ok, rejected int
	lat                record.Histogram
	secs               float64       // from the first request to the last response
	queue, compute     time.Duration // summed over successful responses
	batchItems         int           // Σ batch size over successful responses
	batches            int
	items              int // items computed
}

type item struct {
	arrive time.Duration
}

// simulate drives srv at rate requests/s, evenly spaced as vegeta's constant
// pacer sends them, for dur and returns what a client would have measured.
// The machine runs slow times slower than the cost model during this repeat
// (the noise between repeats on a shared machine). inflightCap is the
// generator's limit on requests in flight; arrivals beyond it are not sent
// (the generator falls behind: coordinated omission).
func simulate(rng *rand.Rand, c cost, srv server, rate float64, dur time.Duration, inflightCap int, slow float64) outcome {
	const rtt = 400 * time.Microsecond // network and HTTP overhead per request
	var o outcome
	var (
		now      time.Duration
		interval = time.Duration(1e9 / rate)
		next     = time.Duration(rng.Float64() * float64(interval))
		forming  []item
		deadline time.Duration
		queue    [][]item
		queued   int // items admitted and not yet computing
		free     = make([]time.Duration, srv.workers)
		finish   []time.Duration // completion times of requests in flight
	)
	closeBatch := func() {
		queue = append(queue, forming)
		forming = nil
	}
	slabs := srv.policy != ""
	ready := func() bool {
		switch srv.policy {
		case "immediate":
			return true
		case "adaptive":
			return len(forming) >= adaptiveTarget(c, srv, rate, free, now) || now >= deadline
		default:
			return now >= deadline
		}
	}
	dispatch := func() {
		for {
			w := slices.Index(free, slices.Min(free))
			if free[w] > now {
				return
			}
			var b []item
			switch {
			case len(queue) > 0:
				b = queue[0]
				queue = queue[1:]
			case slabs && len(forming) > 0 && ready():
				b, forming = forming, nil
			default:
				return
			}
			queued -= len(b)
			d := c.of(rng, len(b), srv.workers, slow)
			free[w] = now + d
			o.batches++
			o.items += len(b)
			for _, it := range b {
				done := now + d + rtt
				finish = append(finish, done)
				o.secs = max(o.secs, done.Seconds())
				if it.arrive >= dur { // only requests sent in the measured window count
					continue
				}
				o.ok++
				o.lat.Record(done - it.arrive)
				o.queue += now - it.arrive
				o.compute += d
				o.batchItems += len(b)
			}
		}
	}
	for {
		t := time.Duration(math.MaxInt64)
		if next < dur {
			t = next
		}
		switch {
		case len(forming) > 0 && !slabs:
			t = min(t, deadline)
		case len(forming) > 0 && deadline > now: // a slab's deadline makes it ready
			t = min(t, deadline)
		}
		switch w := slices.Min(free); {
		case len(queue) > 0:
			t = min(t, max(w, now))
		case slabs && len(forming) > 0 && w > now: // a worker turning idle may take the slab
			t = min(t, w)
		}
		if t == math.MaxInt64 {
			break
		}
		now = t
		if len(forming) > 0 && now >= deadline && !slabs {
			closeBatch()
		}
		if next < dur && now == next {
			next += interval
			finish = slices.DeleteFunc(finish, func(f time.Duration) bool { return f <= now })
			switch {
			case len(finish)+queued >= inflightCap: // the generator is blocked
			case queued+1 > srv.queueCap:
				o.sent++
				o.rejected++
				o.secs = max(o.secs, (now + rtt).Seconds())
			default:
				o.sent++
				queued++
				if len(forming) == 0 {
					deadline = now + srv.maxLatency
				}
				forming = append(forming, item{arrive: now})
				if len(forming) >= srv.batch || (srv.maxLatency == 0 && !slabs) {
					closeBatch()
				}
			}
		}
		dispatch()
	}
	o.secs = max(o.secs, dur.Seconds())
	return o
}

// adaptiveTarget is the adaptive policy's target batch size, as
// server/batch computes it, from the known arrival rate and batch cost:
// greedy (1) with one worker, else the size at which W workers keep up at
// 90 % utilisation, rounded down with two or more idle workers.
func adaptiveTarget(c cost, srv server, rate float64, free []time.Duration, now time.Duration) int {
	if srv.workers <= 1 {
		return 1
	}
	idle := 0
	for _, f := range free {
		if f <= now {
			idle++
		}
	}
	scale := 1 + c.contention*float64(srv.workers-1)
	a, per := c.fixed.Seconds()*scale, c.perItem.Seconds()*scale
	den := float64(srv.workers)*0.9 - rate*per
	if den <= 0 {
		return srv.batch
	}
	n := rate * a / den
	if idle >= 2 {
		n = math.Floor(n)
	} else {
		n = math.Ceil(n)
	}
	return min(srv.batch, max(1, int(n)))
}

// sweep is a fixture run's shape.
type sweep struct {
	dir, scenario string
	cost          cost
	batches       []int
	workers       []int
	policies      []string // when set: no naive points, a point per policy, rates per worker
	rates         []float64
	maxLatency    time.Duration
	queueCap      int
	inflightCap   int
	repeats       int
	measure       time.Duration // per repeat
	noise         float64       // relative standard deviation of the machine's speed between repeats
	genCPUPerReq  float64       // load generator CPU seconds per request sent
	histograms    bool
	slo           record.SLO
	offline       map[int]float64
	seed          uint64
}

var start = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

func (s sweep) manifest() record.Manifest {
	return record.Manifest{
		Scenario:     s.scenario,
		ScenarioFile: "scenarios/" + s.scenario + ".yaml",
		ScenarioYAML: fmt.Sprintf("name: %s\nsweep:\n  batch: %v\n  workers: %v\n  load: %v\n", s.scenario, s.batches, s.workers, s.rates),
		InferVersion: "v0.1.0",
		InferCommit:  "fixture",
		Model:        "sim",
		Runtime:      fmt.Sprintf("sim fixed=%v per_item=%v", s.cost.fixed, s.cost.perItem),
		Cores:        2,
		GoVersion:    "go1.26.8",
		OS:           "linux/amd64",
		Host:         "fixture",
		Start:        start,
		Offline:      s.offline,
		SLO:          s.slo,
	}
}

// points lists the sweep: the naive endpoint at each rate, then the batched
// one for each batch size × workers × rate; or, with policies, for each
// policy × workers × rate (times the workers: load.per_worker).
func (s sweep) points() []record.Point {
	var pts []record.Point
	if len(s.policies) > 0 {
		for _, pol := range s.policies {
			for _, w := range s.workers {
				for _, r := range s.rates {
					rate := r * float64(w)
					pts = append(pts, record.Point{Name: fmt.Sprintf("batched b=%d w=%d lat=%v %s rate=%g/s", s.batches[0], w, s.maxLatency, pol, rate),
						Endpoint: "batched", Targets: []string{"http://127.0.0.1:8080/batched"}, Batch: s.batches[0], Workers: w,
						Latency: record.Duration(s.maxLatency), Policy: pol, Load: record.Load{Mode: "open", Pacer: "constant", Rate: rate}, Items: 1})
				}
			}
		}
		return pts
	}
	for _, r := range s.rates {
		pts = append(pts, record.Point{Name: fmt.Sprintf("naive rate=%g", r), Endpoint: "naive", Targets: []string{"http://127.0.0.1:8080/naive"},
			Batch: 1, Workers: 1, Load: record.Load{Mode: "open", Pacer: "constant", Rate: r}, Items: 1})
	}
	for _, b := range s.batches {
		for _, w := range s.workers {
			for _, r := range s.rates {
				pts = append(pts, record.Point{Name: fmt.Sprintf("batched b=%d w=%d rate=%g", b, w, r), Endpoint: "batched",
					Targets: []string{"http://127.0.0.1:8080/batched"}, Batch: b, Workers: w, Latency: record.Duration(s.maxLatency),
					Policy: "fixed", Load: record.Load{Mode: "open", Pacer: "constant", Rate: r}, Items: 1})
			}
		}
	}
	return pts
}

func (s sweep) run() (record.Manifest, []record.Record) {
	m := s.manifest()
	rng := rand.New(rand.NewPCG(s.seed, 7))
	at := start.Add(2 * time.Second)
	var recs []record.Record
	for i, p := range s.points() {
		srv := server{batch: p.Batch, workers: p.Workers, maxLatency: p.Latency.D(), queueCap: s.queueCap}
		if len(s.policies) > 0 {
			srv.policy = p.Policy
			srv.queueCap = s.queueCap * p.Workers // infer serve's default: 16 × batch × workers
		}
		if p.Endpoint == "naive" {
			srv.maxLatency = 0
		}
		rec := record.Record{Index: i, Point: p, Start: at, TargetRate: p.Load.Rate, Status: map[string]int{}}
		var all record.Histogram
		var ok, sent, rejected, timed, batchItems, batches, items int
		var queue, compute time.Duration
		var secs float64 // the load's span, summed over repeats
		for range s.repeats {
			o := simulate(rng, s.cost, srv, p.Load.Rate, s.measure, s.inflightCap, math.Exp(rng.NormFloat64()*s.noise))
			secs += o.secs
			all.Merge(&o.lat)
			ok, sent, rejected = ok+o.ok, sent+o.sent, rejected+o.rejected
			timed += o.ok
			batchItems, batches, items = batchItems+o.batchItems, batches+o.batches, items+o.items
			queue, compute = queue+o.queue, compute+o.compute
			if s.repeats > 1 {
				pc := o.lat.Percentiles()
				rec.Repeats = append(rec.Repeats, record.Repeat{Throughput: round(float64(o.ok) / o.secs),
					AchievedRate: round(float64(o.sent) / s.measure.Seconds()), P50: pc.P50, P99: pc.P99})
			}
		}
		dur := time.Duration(s.repeats) * s.measure
		rec.Duration = record.Duration(dur)
		rec.Sent = sent
		rec.AchievedRate = round(float64(sent) / dur.Seconds())
		rec.Throughput = round(float64(ok) / secs)
		rec.ItemsPerSec = round(float64(ok*p.Items) / secs)
		rec.Latency = all.Percentiles()
		if s.histograms && all.Count() > 0 {
			h := all
			rec.Histogram = &h
		}
		if ok > 0 {
			rec.Status["200"] = ok
			rec.Server = record.ServerSide{
				ResponseBatch: round(float64(batchItems) / float64(ok)),
				MeanQueue:     us(queue / time.Duration(ok)),
				MeanCompute:   us(compute / time.Duration(ok)),
				Timed:         timed,
				Metrics: &record.Metrics{Batches: float64(batches), Items: float64(items),
					MeanBatch: round(float64(items) / float64(max(batches, 1))), MeanQueue: us(queue / time.Duration(ok))},
			}
		}
		if rejected > 0 {
			rec.Status["429"] = rejected
		}
		rec.GeneratorCPU = round(0.02 + s.genCPUPerReq*rec.AchievedRate)
		rec.Flags, rec.Valid = flags(&rec)
		recs = append(recs, rec)
		at = at.Add(dur + time.Duration(s.repeats)*2*time.Second) // warm-up of 2s per repeat
	}
	m.End = at
	return m, recs
}

// flags applies the validity rules `infer bench` uses.
func flags(r *record.Record) ([]string, bool) {
	var f []string
	valid := true
	if r.TargetRate > 0 && r.AchievedRate < 0.95*r.TargetRate {
		f, valid = append(f, record.FlagCoordinatedOmission), false
	}
	if r.GeneratorCPU >= 0.9 {
		f, valid = append(f, record.FlagGeneratorSaturated), false
	}
	if r.Sent > r.Status["200"] {
		f = append(f, record.FlagErrors)
	}
	if r.Status["200"] == 0 {
		f, valid = append(f, record.FlagNoSuccess), false
	}
	return f, valid
}

func round(v float64) float64 { return math.Round(v*100) / 100 }

// us rounds d to the microsecond, as Server-Timing reports it.
func us(d time.Duration) record.Duration { return record.Duration(d.Round(time.Microsecond)) }

func write(out string) error {
	sim := sweep{
		dir: "sim", scenario: "sim-sweep",
		cost:    cost{fixed: 77 * time.Millisecond, perItem: 1160 * time.Microsecond, jitter: 0.01},
		batches: []int{1, 2, 4, 8, 16, 32, 64}, workers: []int{1, 2, 3, 4}, rates: []float64{10, 100, 400, 1600, 3200},
		maxLatency: 50 * time.Millisecond, queueCap: 128, inflightCap: 1024, repeats: 3, measure: 3 * time.Second, noise: 0.03,
		genCPUPerReq: 0.00004, histograms: true,
		slo:  record.SLO{P99: record.Duration(500 * time.Millisecond), MaxErrorRate: 0.01},
		seed: 1,
	}
	slow := sim
	slow.dir, slow.seed, slow.histograms = "sim-slow", 2, false
	slow.cost.fixed, slow.cost.perItem = sim.cost.fixed*115/100, sim.cost.perItem*115/100

	cpu := sweep{
		dir: "cpu", scenario: "cpu-bert-mini",
		cost:    cost{fixed: 6 * time.Millisecond, perItem: 4500 * time.Microsecond, contention: 0.35, jitter: 0.08},
		batches: []int{1, 4, 16}, workers: []int{1, 2}, rates: []float64{25, 50, 100, 200},
		maxLatency: 10 * time.Millisecond, queueCap: 1024, inflightCap: 32, repeats: 1, measure: 5 * time.Second, noise: 0.05,
		genCPUPerReq: 0.0045, histograms: true,
		slo:     record.SLO{P99: record.Duration(200 * time.Millisecond), MaxErrorRate: 0.01, MinThroughput: 50},
		offline: map[int]float64{1: 98.4, 2: 135.2, 4: 165.9, 8: 187.3, 16: 199.6, 32: 205.1},
		seed:    3,
	}
	// The issue-7 comparison: fixed, immediate and adaptive from 5 % to
	// 130 % of capacity (64 / 151.24 ms = 423 req/s per worker).
	policies := sweep{
		dir: "policies", scenario: "policies-sim",
		cost:    cost{fixed: 77 * time.Millisecond, perItem: 1160 * time.Microsecond, jitter: 0.01},
		batches: []int{64}, workers: []int{1, 4}, policies: []string{"fixed", "immediate", "adaptive"},
		rates:      []float64{21, 106, 212, 317, 402, 550},
		maxLatency: 100 * time.Millisecond, queueCap: 16 * 64, inflightCap: 1000, repeats: 1, measure: 4 * time.Second, noise: 0.02,
		genCPUPerReq: 0.00004, histograms: true,
		seed: 4,
	}
	for _, s := range []sweep{sim, slow, cpu, policies} {
		m, recs := s.run()
		if s.dir == "cpu" {
			m.Model, m.Runtime = "bert-mini", "onnxruntime 1.22.0 (cpu)"
		}
		if err := save(filepath.Join(out, s.dir), &m, recs, ""); err != nil {
			return err
		}
		if s.dir == "sim" {
			if err := savePartial(filepath.Join(out, "partial"), m, recs); err != nil {
				return err
			}
			if err := save(filepath.Join(out, "one-point"), nil, recs[:1], ""); err != nil {
				return err
			}
		}
	}
	return saveFailed(filepath.Join(out, "failed"), sim)
}

// savePartial is a run stopped by the user during its 41st point: the
// manifest says interrupted, the last record is partial, and the results
// file ends with a line cut off mid-write.
func savePartial(dir string, m record.Manifest, recs []record.Record) error {
	recs = slices.Clone(recs[:41])
	last := &recs[40]
	last.Partial = true
	last.Duration = record.Duration(last.Duration.D() / 3)
	last.Repeats = last.Repeats[:1]
	m.Interrupted = true
	m.End = time.Time{}
	b, err := json.Marshal(recs[1])
	if err != nil {
		return err
	}
	return save(dir, &m, recs, string(b[:len(b)/2]))
}

// saveFailed is a run against a server that died after the naive points:
// every batched point failed, one with 503s while draining, the rest with
// refused connections.
func saveFailed(dir string, s sweep) error {
	s.batches, s.workers, s.rates, s.repeats, s.histograms = []int{8, 32}, []int{1}, []float64{10, 100}, 1, false
	m, recs := s.run()
	m.Scenario = "sim-failed"
	for i := range recs {
		r := &recs[i]
		if r.Point.Endpoint != "batched" {
			continue
		}
		r.Throughput, r.ItemsPerSec, r.Latency, r.Server, r.Repeats = 0, 0, record.Percentiles{}, record.ServerSide{}, nil
		if i == 2 {
			r.Status = map[string]int{"503": r.Sent}
		} else {
			r.Status = map[string]int{"error": r.Sent}
			r.Errors = map[string]int{"dial tcp 127.0.0.1:8080: connect: connection refused": r.Sent}
		}
		r.Flags, r.Valid = flags(r)
	}
	return save(dir, &m, recs, "")
}

func save(dir string, m *record.Manifest, recs []record.Record, tail string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if m != nil {
		if err := record.WriteManifest(dir, m); err != nil {
			return err
		}
	}
	var sb strings.Builder
	for _, r := range slices.SortedFunc(slices.Values(recs), func(a, b record.Record) int { return cmp.Compare(a.Index, b.Index) }) {
		b, err := json.Marshal(&r)
		if err != nil {
			return err
		}
		sb.Write(b)
		sb.WriteByte('\n')
	}
	sb.WriteString(tail)
	return os.WriteFile(filepath.Join(dir, record.ResultsFile), []byte(sb.String()), 0o644)
}
