package route

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// hashPicker is consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam, 2016; HAProxy's hash-balance-factor, Envoy's
// hash_balance_factor): each replica owns pointsPerWeight × weight points on
// a ring of 64-bit hashes, and a key goes to the owner of the first point
// at or after its hash. With Balance c > 0, a replica takes a request only
// while its in-flight requests stay within ceil(c × (all in flight + 1) ×
// its weight ÷ all weights); past that bound, or when it is not ready, the
// request goes on along the ring to the next replica that may take it.
// Removing a replica moves only the keys it owned; while loads are within
// the bound, every request with the same key lands on the same replica. A
// request without a key goes to the least loaded replica.
type hashPicker struct {
	balance float64
	rnd     rng
	ring    atomic.Pointer[ring]
}

// pointsPerWeight is how many points on the ring a replica of weight 1
// owns: 160 as in ketama, which spreads keys within a few percent.
const pointsPerWeight = 160

// DefaultBalance is hash's default load bound, c: a replica takes at most
// 1.25 × the mean load (Vimeo's and HAProxy's example).
const DefaultBalance = 1.25

type ring struct {
	points []uint64 // sorted
	owners []uint16 // owners[i] owns points[i]: an index into replicas
	index  map[*Replica]int
}

func newHashPicker(balance float64, rnd rng) *hashPicker {
	p := &hashPicker{balance: balance, rnd: rnd}
	p.ring.Store(&ring{index: map[*Replica]int{}})
	return p
}

func (p *hashPicker) SetReplicas(all []*Replica) {
	type point struct {
		h     uint64
		owner uint16
	}
	var pts []point
	rg := &ring{index: make(map[*Replica]int, len(all))}
	for i, r := range all {
		rg.index[r] = i
		for v := range pointsPerWeight * r.weight {
			pts = append(pts, point{hashString(r.name + "#" + strconv.Itoa(v)), uint16(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return int(a.owner) - int(b.owner)
	})
	rg.points = make([]uint64, len(pts))
	rg.owners = make([]uint16, len(pts))
	for i, pt := range pts {
		rg.points[i], rg.owners[i] = pt.h, pt.owner
	}
	p.ring.Store(rg)
}

// Candidate states during one pick.
const (
	hashOut       = iota // not a candidate, or refused already
	hashCandidate        // may take it
)

func (p *hashPicker) Pick(req *Request, cands []*Replica) (*Replica, Reason) {
	if req.Key == "" {
		return leastLoaded(cands, p.rnd), ReasonFallback
	}
	rg := p.ring.Load()
	n := len(rg.points)
	var state [MaxReplicas]uint8
	var byIndex [MaxReplicas]*Replica
	total, weights, open := 0, 0, 0
	for _, c := range cands {
		if i, ok := rg.index[c]; ok {
			state[i], byIndex[i] = hashCandidate, c
			open++
		}
		total += c.InFlight()
		weights += c.weight
	}
	if n == 0 || open == 0 {
		return leastLoaded(cands, p.rnd), ReasonFallback
	}
	start, _ := slices.BinarySearch(rg.points, hashString(req.Key))
	home := -1
	for step := range n {
		o := int(rg.owners[(start+step)%n])
		if home < 0 {
			home = o
		}
		if state[o] != hashCandidate {
			continue
		}
		if r := byIndex[o]; p.fits(r, total, weights) {
			if o == home {
				return r, ReasonAffinity
			}
			return r, ReasonFallback
		}
		state[o] = hashOut
		if open--; open == 0 {
			break
		}
	}
	return leastLoaded(cands, p.rnd), ReasonFallback
}

// fits reports whether r may take one more request within the bound.
func (p *hashPicker) fits(r *Replica, total, weights int) bool {
	if p.balance == 0 {
		return true
	}
	bound := math.Ceil(p.balance * float64(total+1) * float64(r.weight) / float64(weights))
	return float64(r.InFlight()+1) <= bound
}

// hashString is FNV-1a with a final mix (splitmix64's), so that keys that
// differ in their last byte land far apart on the ring. It is the same in
// every router process, so that routers side by side agree.
func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return mix64(h.Sum64())
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// KeySource says where a request's routing key is: a header, OpenAI's
// "user" field, or a field of the JSON body.
type KeySource struct {
	Header string   // a header's name; "" when the key is in the body
	Field  []string // the path of a JSON field of the body ("user" for OpenAI's)
}

// DefaultKeyHeader is the header hash reads the key from by default.
const DefaultKeyHeader = "X-Routing-Key"

// ParseKey reads where the key is: header:NAME (or a bare header name),
// user (OpenAI's "user" field), or json:a.b (a field of the JSON body, a
// dotted path of object keys).
func ParseKey(s string) (KeySource, error) {
	switch kind, arg, ok := strings.Cut(s, ":"); {
	case s == "user":
		return KeySource{Field: []string{"user"}}, nil
	case ok && kind == "json":
		path := strings.Split(arg, ".")
		if slices.Contains(path, "") || len(path) > 8 {
			return KeySource{}, fmt.Errorf("%q: want json:a.b, a dotted path of at most 8 object keys", s)
		}
		return KeySource{Field: path}, nil
	case ok && kind == "header":
		s = arg
		fallthrough
	default:
		if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r) }) {
			return KeySource{}, fmt.Errorf("%q: want header:NAME, user or json:a.b", s)
		}
		return KeySource{Header: s}, nil
	}
}

func (k KeySource) String() string {
	switch {
	case k.Header != "":
		return "header:" + k.Header
	case len(k.Field) == 1 && k.Field[0] == "user":
		return "user"
	default:
		return "json:" + strings.Join(k.Field, ".")
	}
}
