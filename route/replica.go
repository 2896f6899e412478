package route

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/internal/setting"
)

// State is a replica's health as the router sees it.
type State int32

// A replica starts Unknown; the first health check makes it Ready or Down.
// Only Ready replicas that are not drained are picked.
const (
	StateUnknown State = iota // not checked yet
	StateReady                // passes its health check
	StateDown                 // fails it, or ejected: out until a check passes after its backoff
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateDown:
		return "down"
	default:
		return "unknown"
	}
}

// Replica is one model server behind the router. Its exported methods are
// safe for concurrent use; pickers read its load and weight.
type Replica struct {
	name      string   // host:port, unique within the router
	nameValue []string // {name}: the value of ReplicaHeader, shared by every answer
	timing    []string // {route;desc="name"}: the router's Server-Timing entry, shared likewise
	url       *url.URL
	weight    int

	inFlight atomic.Int64 // requests sent and not yet finished
	state    atomic.Int32 // State
	drained  atomic.Bool  // by the admin API: not picked, in-flight requests finish
	removed  atomic.Bool  // gone from the DNS answer: not picked
	sample   atomic.Pointer[Sample]
	lastSeen atomic.Int64 // unix nanoseconds when the replica last sent an answer's headers or bytes

	mu         sync.Mutex // guards the health record below
	fails      int        // consecutive failed answers (5xx, timeouts, broken connections)
	probeFails int        // consecutive failed health checks
	ejections  int        // times ejected recently: the backoff doubles with each
	downUntil  time.Time  // a Down replica is not readmitted before this
	readySince time.Time
	lastErr    string
	healthPath string // the path that answered the health check ("" not yet known)

	m *replicaMetrics
}

func newReplica(name string, u *url.URL, weight int) *Replica {
	return &Replica{name: name, nameValue: []string{name}, timing: []string{`route;desc="` + name + `"`}, url: u, weight: weight}
}

// Name is the replica's host:port.
func (r *Replica) Name() string { return r.name }

// URL is the replica's base URL.
func (r *Replica) URL() *url.URL { return r.url }

// Weight is the replica's share against the others.
func (r *Replica) Weight() int { return r.weight }

// InFlight is the number of requests the router has sent the replica and
// not yet finished: the load that least-request, power-of-two, hash's
// bound and prefix's balance compare.
func (r *Replica) InFlight() int { return int(r.inFlight.Load()) }

// State is the replica's health.
func (r *Replica) State() State { return State(r.state.Load()) }

// Drained reports whether the admin API took the replica out of rotation.
func (r *Replica) Drained() bool { return r.drained.Load() }

// eligible reports whether the replica may be picked.
func (r *Replica) eligible() bool {
	return r.State() == StateReady && !r.drained.Load() && !r.removed.Load()
}

// Sample is the load a replica last reported on its /metrics, read by the
// scored policy.
type Sample struct {
	At       time.Time // when it was read
	InFlight int       // the router's in-flight requests to the replica then
	Waiting  float64   // requests waiting to start (queue depth)
	Running  float64   // sequences running
	KV       float64   // KV cache use, 0 to 1
	HasQueue bool      // the replica exports its queue depth
	HasKV    bool      // the replica exports its KV cache use
}

// Sample returns the replica's last load sample, nil before the first.
func (r *Replica) Sample() *Sample { return r.sample.Load() }

// loadLess reports whether a carries less load per weight than b.
func loadLess(a, b *Replica) bool {
	return int64(a.InFlight())*int64(b.weight) < int64(b.InFlight())*int64(a.weight)
}

// loadEqual reports whether a and b carry the same load per weight.
func loadEqual(a, b *Replica) bool {
	return int64(a.InFlight())*int64(b.weight) == int64(b.InFlight())*int64(a.weight)
}

// Health of replicas: active checks and passive ejection.
//
// A replica is ejected (made Down) at once when it refuses a connection (its
// port is closed), after HealthConfig.Failures failed requests in a row
// (500, 502, 503, 504, a deadline passed, a connection that broke or could
// not be made in time), or after two failed health checks in a row. Failed
// requests never eject the last replica that may be picked: under overload
// they say more about the load than about the replica, and the health
// checks still take out one that is gone. It stays out for its backoff (EjectBase,
// doubling with each ejection up to EjectMax; the count is forgotten after
// EjectMax ready), then the first health check that passes readmits it.

// HealthConfig configures health checks and ejection. Zero values take the
// defaults.
type HealthConfig struct {
	// Path is the health check's path. Default: /readyz, else /health,
	// else /v1/models, whichever answers other than 404 first.
	Path string
	// Interval between health checks of a replica. Default 500ms.
	Interval time.Duration
	// Timeout of one health check. Default 1s.
	Timeout time.Duration
	// Failures is how many consecutive failed answers eject a replica.
	// Default 3.
	Failures int
	// EjectBase is how long a first ejection lasts at least. Default 1s.
	EjectBase time.Duration
	// EjectMax bounds the ejection backoff. Default 30s.
	EjectMax time.Duration
}

// Bounds of HealthConfig.
const (
	MinHealthInterval = 10 * time.Millisecond
	MaxEjectFailures  = 100
)

func (h HealthConfig) withDefaults() HealthConfig {
	if h.Interval <= 0 {
		h.Interval = 500 * time.Millisecond
	}
	if h.Timeout <= 0 {
		h.Timeout = time.Second
	}
	if h.Failures <= 0 {
		h.Failures = 3
	}
	if h.EjectBase <= 0 {
		h.EjectBase = time.Second
	}
	if h.EjectMax <= 0 {
		h.EjectMax = 30 * time.Second
	}
	h.EjectMax = max(h.EjectMax, h.EjectBase)
	return h
}

func (h HealthConfig) validate() error {
	switch {
	case h.Interval < 0 || h.Interval > 0 && h.Interval < MinHealthInterval:
		return setting.Errorf(SettingHealthInterval, h.Interval, "at least %v", MinHealthInterval)
	case h.Timeout < 0:
		return setting.Errorf(SettingHealthTimeout, h.Timeout, "must not be negative")
	case h.EjectBase < 0:
		return setting.Errorf(SettingEjectTime, h.EjectBase, "must not be negative")
	case h.EjectMax < 0:
		return setting.Errorf(SettingEjectMax, h.EjectMax, "must not be negative")
	case h.Failures < 0 || h.Failures > MaxEjectFailures:
		return setting.Errorf(SettingEjectFailures, h.Failures, "want 1 to %d", MaxEjectFailures)
	case h.Path != "" && h.Path[0] != '/':
		return setting.Errorf(SettingHealthPath, fmt.Sprintf("%q", h.Path), "want a path starting with /")
	}
	return nil
}

// eject makes r Down for its backoff. It reports whether r was picked
// before (false: it was already out).
func (r *Replica) eject(h HealthConfig, now time.Time, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = reason
	if r.State() == StateDown {
		return false
	}
	r.ejections++
	backoff := h.EjectBase << min(r.ejections-1, 20)
	r.downUntil = now.Add(min(backoff, h.EjectMax))
	r.fails, r.probeFails = 0, 0
	r.state.Store(int32(StateDown))
	return true
}

// answered records the outcome of a request sent to r: ok (any answer but
// a server failure), or a failure. It reports whether r has now failed
// HealthConfig.Failures times in a row.
func (r *Replica) answered(h HealthConfig, ok bool, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.fails = 0
		return false
	}
	r.fails++
	r.lastErr = reason
	return r.fails >= h.Failures
}

// seen notes that the replica sent part of an answer at now. Streams call
// it for each read: it writes at most every 50ms, so that many streams do
// not contend for it.
func (r *Replica) seen(now time.Time) {
	if n := now.UnixNano(); n-r.lastSeen.Load() > int64(50*time.Millisecond) {
		r.lastSeen.Store(n)
	}
}

// checked records a health check's outcome; it returns the state before
// and after. A check that timed out while the replica was sending answers
// (within the last check interval and timeout) does not count: under load
// a slow check says more about the load than about the replica.
func (r *Replica) checked(h HealthConfig, now time.Time, err error, refused bool) (before, after State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before = r.State()
	after = before
	if errors.Is(err, errTimedOut) && before == StateReady && now.UnixNano()-r.lastSeen.Load() < int64(h.Interval+h.Timeout) {
		return before, after
	}
	if err == nil {
		r.probeFails = 0
		switch {
		case before == StateUnknown, before == StateDown && !now.Before(r.downUntil):
			after = StateReady
			r.readySince = now
			r.fails = 0
		case before == StateReady && r.ejections > 0 && now.Sub(r.readySince) >= h.EjectMax:
			r.ejections = 0 // ready long enough: the next ejection starts from EjectBase
		}
	} else {
		r.probeFails++
		r.lastErr = "health check: " + err.Error()
		switch {
		case before == StateUnknown:
			after = StateDown // never ready: no backoff, readmitted by the first check that passes
		case before == StateReady && (refused || r.probeFails >= 2):
			r.ejections++
			r.downUntil = now.Add(min(h.EjectBase<<min(r.ejections-1, 20), h.EjectMax))
			after = StateDown
		}
	}
	r.state.Store(int32(after))
	return before, after
}

// ReplicaStatus is a replica as the admin API lists it.
type ReplicaStatus struct {
	Name      string  `json:"name"`
	URL       string  `json:"url"`
	Weight    int     `json:"weight"`
	State     string  `json:"state"`
	Drained   bool    `json:"drained"`
	InFlight  int     `json:"in_flight"`
	Ejections int     `json:"ejections"`
	LastError string  `json:"last_error,omitempty"`
	Waiting   float64 `json:"waiting,omitempty"`
	Running   float64 `json:"running,omitempty"`
	KVUsage   float64 `json:"kv_usage,omitempty"`
	SampleAge string  `json:"sample_age,omitempty"`
}

// Status returns r's state for the admin API.
func (r *Replica) Status(now time.Time) ReplicaStatus {
	r.mu.Lock()
	st := ReplicaStatus{Name: r.name, URL: r.url.String(), Weight: r.weight, State: r.State().String(),
		Drained: r.Drained(), InFlight: r.InFlight(), Ejections: r.ejections, LastError: r.lastErr}
	r.mu.Unlock()
	if s := r.Sample(); s != nil {
		st.Waiting, st.Running, st.KVUsage = s.Waiting, s.Running, s.KV
		st.SampleAge = now.Sub(s.At).Round(time.Millisecond).String()
	}
	return st
}
