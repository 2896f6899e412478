package loadgen

import (
	"slices"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/search"
)

// SearchLive is a capacity search's state, for the live view: the
// configuration searched, the level being measured and the bracket
// narrowing around the capacity.
type SearchLive struct {
	Config, Configs int    // the configuration searched (from 1), of how many
	Name            string // its name, without the load
	Over            string // record.OverRate or record.OverClients
	From, To        float64
	Tolerance       float64
	MaxProbes       int
	// Probe is the probe being measured (from 1), at Level, in its
	// Repeat-th measurement (from 1; a level near the SLO's bounds, or
	// one in doubt, is measured again).
	Probe  int
	Level  float64
	Repeat int
	// Passed and Failed are the bracket so far: the highest level that
	// met the SLO and the lowest that missed it; 0 for none.
	Passed, Failed float64
	// Left estimates the probes this configuration still needs.
	Left int
	// Steps are this configuration's probes decided so far, in order.
	Steps []SearchStep
	// Found are the finished configurations' capacities, in order.
	Found []record.Capacity
}

// SearchStep is a probe decided.
type SearchStep struct {
	Level    float64
	Pass     bool
	Margin   float64 // the median of its measurements' (search.Measurement)
	Measured int     // its measurements
	Doubtful bool    // every measurement was in doubt (search.Probe)
	Partial  bool
	// Passed and Failed are the bracket after it (SearchLive's).
	Passed, Failed float64
}

// startSearch begins the search of configuration ci (from 0) of n.
func (m *monitor) startSearch(ci, n int, name string, s *scenario.Search) {
	m.mu.Lock()
	defer m.mu.Unlock()
	live := &SearchLive{Config: ci + 1, Configs: n, Name: name, Over: s.Over, From: s.From, To: s.To,
		Tolerance: s.Tolerance, MaxProbes: s.MaxPoints}
	live.Left = s.Config().Left(0, 0, 0, 0)
	if old := m.search; old != nil {
		live.Found = old.Found
		if len(old.Steps) > 0 {
			live.Found = append(live.Found, found(old))
		}
	}
	m.search = live
}

// found is the capacity of a finished search.
func found(s *SearchLive) record.Capacity {
	return record.Capacity{Config: s.Config - 1, Name: s.Name, Over: s.Over, Capacity: s.Passed, Failed: s.Failed,
		Tolerance: s.Tolerance, Probes: len(s.Steps)}
}

// searchLevel marks the measurement rep (from 1) of level.
func (m *monitor) searchLevel(level float64, rep int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.search; s != nil {
		if rep == 1 {
			s.Probe = len(s.Steps) + 1
		}
		s.Level, s.Repeat = level, rep
	}
}

// probed records a probe decided.
func (m *monitor) probed(p search.Probe, rs *record.Search) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.search
	if s == nil {
		return
	}
	s.Steps = append(s.Steps, SearchStep{Level: p.Level, Pass: rs.Pass, Margin: rs.Margin, Measured: len(p.Measurements),
		Doubtful: p.Doubtful, Partial: p.Partial, Passed: p.Passed, Failed: p.Failed})
	s.Passed, s.Failed = p.Passed, p.Failed
	c := search.Config{From: s.From, To: s.To, Whole: s.Over == record.OverClients, Tolerance: s.Tolerance, MaxProbes: s.MaxProbes}
	s.Left = c.Left(len(s.Steps), p.Level, p.Passed, p.Failed)
	if p.End != "" {
		s.Left = 0
	}
}

// searchSnapshot copies the search's state; nil without one.
func (m *monitor) searchSnapshot() *SearchLive {
	if m.search == nil {
		return nil
	}
	s := *m.search
	s.Steps = slices.Clone(s.Steps)
	s.Found = slices.Clone(s.Found)
	if m.snap.Phase == PhaseDone && len(s.Steps) > 0 {
		s.Found = append(s.Found, found(&s))
	}
	return &s
}
