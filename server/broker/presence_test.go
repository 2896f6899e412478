package broker

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
)

func TestDrainMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type look struct {
		at            float64
		added, length int64
	}
	for _, tc := range []struct {
		name  string
		looks []look
		want  float64
	}{
		{"nothing measured yet", []look{{0, 0, 0}}, 0},
		{"an empty stream says nothing", []look{{0, 5, 0}, {1, 5, 0}, {2, 5, 0}}, 0},
		{"nor one that emptied", []look{{0, 5, 5}, {1, 5, 0}}, 0},
		{"5 items/s while busy", []look{{0, 20, 20}, {1, 20, 15}, {2, 25, 15}, {3, 25, 10}}, 5},
		{"idle intervals between busy ones do not count",
			[]look{{0, 10, 10}, {1, 10, 5}, {2, 10, 0}, {10, 10, 0}, {20, 10, 0}, {21, 20, 10}, {22, 20, 5}}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m drainMeter
			for _, l := range tc.looks {
				m.observe(at(l.at), l.added, l.length)
			}
			if got := m.rate(); math.Abs(got-tc.want) > 0.01*tc.want+1e-9 {
				t.Errorf("rate() = %v, want %v", got, tc.want)
			}
		})
	}
	// A stream recreated (entries-added went down: Redis restarted) starts
	// a new interval; the old ones still weigh in, decayed: the rate lies
	// between the old 10/s and the new 2/s.
	var m drainMeter
	for _, l := range []struct {
		at            float64
		added, length int64
	}{{0, 100, 50}, {1, 100, 40}, {2, 3, 3}, {3, 3, 1}} {
		m.observe(at(l.at), l.added, l.length)
	}
	if got := m.rate(); got < 2 || got > 10 {
		t.Errorf("after a restart: rate() = %v, want between 2 and 10 items/s", got)
	}
}

type hashed struct{ models.Factory }

func (hashed) SHA256() (string, error) { return "abc", nil }

type fakeFactory struct{ info models.Info }

func (f fakeFactory) Info() models.Info                            { return f.info }
func (fakeFactory) Prepare(string) (models.Input, error)           { return models.Input{}, nil }
func (fakeFactory) New(context.Context, int) (models.Model, error) { return nil, nil }
func (fakeFactory) Close() error                                   { return nil }

func TestFingerprint(t *testing.T) {
	sim := fakeFactory{models.Info{Name: "sim", Task: "classify", Backend: "sim", Params: "fixed=1ms"}}
	fp := func(f models.Factory) string {
		s, err := Fingerprint(f)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b := fp(sim), fp(fakeFactory{models.Info{Name: "sim", Task: "classify", Backend: "sim", Params: "fixed=77ms"}}); a != b {
		t.Errorf("fingerprints differ with the settings only (%s, %s): a worker's costs are its own", a, b)
	}
	if a, b := fp(sim), fp(fakeFactory{models.Info{Name: "sim", Task: "embed", Backend: "sim"}}); a == b {
		t.Errorf("same fingerprint %s for two tasks", a)
	}
	if a, b := fp(sim), fp(hashed{sim}); a == b || len(b) != 12 {
		t.Errorf("fingerprint with weights %q, without %q: want 12 hex digits that differ", b, a)
	}
	if got, want := fp(sim), fingerprint(sim.Info(), ""); got != want {
		t.Errorf("Fingerprint = %s, a frontend's default %s: want the same", got, want)
	}
}
