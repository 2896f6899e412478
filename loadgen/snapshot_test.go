package loadgen

import (
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/attack"
	"github.com/inferhq/infer/loadgen/record"
)

// fakeClock is a settable clock for the monitor.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestMonitorSnapshots(t *testing.T) {
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := newMonitor(clock.now, "quick", "w=1", "results/x", 3)
	load := record.Load{Mode: "open", Rate: 100}
	plan := Plan{Index: 1, Point: record.Point{Name: "batched rate=100/s", Load: load}}
	clock.advance(5 * time.Second) // the first point took 5s
	m.finishPoint(Row{Index: 0, Name: "first"})
	m.startPoint(plan, 2, 3*time.Second, 6*time.Second)
	m.startAttack(1, load, time.Second, 2*time.Second)
	m.setPhase(PhaseWarmup)

	// Two ticks of 250ms; 10 answers each, one a 429; batch sizes 4.
	for range 2 {
		for i := range 10 {
			o := &attack.Outcome{Status: "200", Latency: time.Duration(i+1) * time.Millisecond, Timed: true, Timing: attack.ServerTiming{Batch: 4}}
			if i == 9 {
				o = &attack.Outcome{Status: "429", ErrText: "HTTP 429 queue_full"}
			}
			m.add(o)
		}
		clock.advance(DefaultTick)
		m.tick()
	}
	clock.advance(DefaultTick) // half into the third tick, nothing yet
	s := m.snapshot(DefaultTick)

	if s.Scenario != "quick" || s.Points != 3 || s.Done != 1 || s.Index != 1 || s.Repeat != 1 || s.Repeats != 2 {
		t.Errorf("progress fields = %+v", s)
	}
	if s.Phase != PhaseWarmup {
		t.Errorf("Phase = %q, want warm-up (0.75s into a 1s warm-up)", s.Phase)
	}
	if s.Elapsed != 5750*time.Millisecond {
		t.Errorf("Elapsed = %v, want 5.75s", s.Elapsed)
	}
	if s.PointElapsed != 750*time.Millisecond || s.PointTotal != 6*time.Second {
		t.Errorf("point progress = %v of %v, want 750ms of 6s", s.PointElapsed, s.PointTotal)
	}
	if s.PhaseElapsed != 750*time.Millisecond || s.PhaseTotal != time.Second || s.MeasuredRPS != 0 || s.Shared != "w=1" {
		t.Errorf("phase progress %v of %v, measured %v/s, shared %q; want 750ms of the 1s warm-up, nothing measured, w=1",
			s.PhaseElapsed, s.PhaseTotal, s.MeasuredRPS, s.Shared)
	}
	if want := 6*time.Second - 750*time.Millisecond + 6*time.Second; s.ETA != want {
		t.Errorf("ETA = %v, want %v", s.ETA, want)
	}
	if s.Window != 750*time.Millisecond || s.RPS < 26.6 || s.RPS > 26.7 {
		t.Errorf("window %v, rps %v; want 750ms, 20 answers / 0.75s = 26.7", s.Window, s.RPS)
	}
	if s.P50 < 5*time.Millisecond || s.P50 > 5100*time.Microsecond || s.P99 < 9*time.Millisecond || s.P99 > 9100*time.Microsecond {
		t.Errorf("p50 %v p99 %v, want 5ms and 9ms (within 1%%)", s.P50, s.P99)
	}
	if s.Batch != 4 || s.TargetRate != 100 {
		t.Errorf("batch %v target %v, want 4 and 100", s.Batch, s.TargetRate)
	}
	if s.Status["200"] != 18 || s.Status["429"] != 2 || s.LastError != "HTTP 429 queue_full" {
		t.Errorf("status %v, last error %q", s.Status, s.LastError)
	}
	if len(s.Spark) != 2 || s.Spark[0] < 9*time.Millisecond {
		t.Errorf("spark = %v, want two ticks' p99 ≈ 9ms", s.Spark)
	}
	if len(s.Finished) != 1 || s.Finished[0].Name != "first" {
		t.Errorf("finished = %+v", s.Finished)
	}

	// Past the warm-up, the phase turns to measuring; old buckets leave
	// the window.
	for range windowTicks {
		clock.advance(DefaultTick)
		m.tick()
	}
	s = m.snapshot(DefaultTick)
	if s.Phase != PhaseMeasuring || s.RPS != 0 || s.P99 != 0 {
		t.Errorf("after the window: phase %q rps %v p99 %v; want measuring, 0, 0", s.Phase, s.RPS, s.P99)
	}
	s.Status["200"] = -1
	if m.snapshot(DefaultTick).Status["200"] != 18 {
		t.Error("a snapshot shares its status map with the monitor")
	}
	// In the measured window (1s of 2s in), the answers received there
	// make the measured rate, as in the record; the phase counts the
	// window alone, not the warm-up.
	clock.t = m.attackStart.Add(1500 * time.Millisecond)
	for i := range 30 {
		m.add(&attack.Outcome{Status: "200", Sent: clock.t.Add(-time.Duration(i) * 10 * time.Millisecond), Latency: time.Millisecond})
	}
	m.add(&attack.Outcome{Status: "200", Sent: m.attackStart, Latency: 10 * time.Millisecond}) // answered in the warm-up
	m.add(&attack.Outcome{Status: "503", Sent: clock.t})
	s = m.snapshot(DefaultTick)
	if s.PhaseElapsed != 500*time.Millisecond || s.PhaseTotal != 2*time.Second || s.MeasuredRPS != 60 {
		t.Errorf("measuring %v of %v at %v/s; want 500ms of 2s, 30 answers in 0.5s = 60/s", s.PhaseElapsed, s.PhaseTotal, s.MeasuredRPS)
	}
	m.notice("no /metrics")
	m.notice("no /metrics")
	if s := m.snapshot(DefaultTick); len(s.Notices) != 1 {
		t.Errorf("notices = %q, want one, said once", s.Notices)
	}
	// A point cut short is finished, not done.
	m.finishPoint(Row{Index: 1, Name: "cut", Partial: true})
	if s := m.snapshot(DefaultTick); s.Done != 1 || len(s.Finished) != 2 {
		t.Errorf("after a partial point: done %d, finished %d; want 1, 2", s.Done, len(s.Finished))
	}

	// A new point starts from zero.
	m.startPoint(Plan{Index: 2}, 1, time.Second, 0)
	s = m.snapshot(DefaultTick)
	if s.Status != nil || len(s.Spark) != 0 || s.PointElapsed != 0 || s.LastError != "" {
		t.Errorf("new point snapshot = %+v", s)
	}
}
