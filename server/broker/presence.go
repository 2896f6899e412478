package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inferhq/infer/models"
)

// Fingerprint identifies the model a factory serves beyond its name and
// task: a digest of its name, task and backend, and of its weights when the
// factory can hash them (a SHA256 method, as ONNX models have; it may read
// the whole file once). Frontends and workers announce it, and log a peer of
// the same model with another fingerprint: same name, different model.
func Fingerprint(f models.Factory) (string, error) {
	var content string
	if h, ok := f.(interface{ SHA256() (string, error) }); ok {
		var err error
		if content, err = h.SHA256(); err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
	}
	return fingerprint(f.Info(), content), nil
}

func fingerprint(m models.Info, content string) string {
	h := sha256.New()
	for _, s := range []string{m.Name, m.Task, m.Backend, content} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// announcement is what a frontend or worker says of itself.
type announcement struct {
	Name        string `json:"name"` // a worker's name, a frontend's id
	Model       string `json:"model"`
	Task        string `json:"task"`
	Fingerprint string `json:"fingerprint"`
	Host        string `json:"host,omitempty"`
	Instances   int    `json:"instances,omitempty"` // workers: model instances
}

func newAnnouncement(name string, m models.Info, fp string) announcement {
	host, _ := os.Hostname()
	return announcement{Name: name, Model: m.Name, Task: m.Task, Fingerprint: fp, Host: host}
}

func (a announcement) model() string { return modelKey(models.Info{Name: a.Model, Task: a.Task}) }

// peerView is what one heartbeat saw of the other side: the live peers of
// our model, and how many serve each other model.
type peerView struct {
	same   []announcement
	others map[string]int // model → live peers
}

func viewOf(peers []announcement, model string) peerView {
	v := peerView{others: map[string]int{}}
	for _, p := range peers {
		if p.model() == model {
			v.same = append(v.same, p)
		} else {
			v.others[p.model()]++
		}
	}
	return v
}

// othersString lists the other models with their peer counts, sorted, as in
// "bert-mini:fill-mask (2), sim:classify (1)"; "none" when there are none.
func (v peerView) othersString() string {
	if len(v.others) == 0 {
		return "none"
	}
	var parts []string
	for m, n := range v.others {
		parts = append(parts, fmt.Sprintf("%s (%d)", m, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// role is one side's keys: a sorted set of live names by expiry and a hash of
// their announcements.
type role struct{ set, info string }

func (c Config) role(name string) role {
	return role{set: c.Prefix + ":" + name, info: c.Prefix + ":" + name + ":info"}
}

// maxPeers bounds the announcements one heartbeat returns.
const maxPeers = 1000

// heartbeat renews an announcement, removes the expired ones of both sides,
// and returns the live peers' announcements. Expiry runs on Redis's clock,
// so that the hosts' clocks do not matter. KEYS: own set, own info, peers'
// set, peers' info. ARGV: own name, expiry in ms, own announcement.
var heartbeat = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
for i = 1, 3, 2 do
	local gone = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'LIMIT', 0, 1000)
	if #gone > 0 then
		redis.call('ZREM', KEYS[i], unpack(gone))
		redis.call('HDEL', KEYS[i + 1], unpack(gone))
	end
end
local names = redis.call('ZRANGE', KEYS[3], 0, ` + fmt.Sprint(maxPeers-1) + `)
if #names == 0 then
	return {}
end
return redis.call('HMGET', KEYS[4], unpack(names))
`)

// presence announces one frontend or worker and reads the other side.
type presence struct {
	rdb    *redis.Client
	self   role
	peers  role
	me     announcement
	meJSON string
	expiry time.Duration
}

func newPresence(rdb *redis.Client, self, peers role, me announcement, expiry time.Duration) *presence {
	b, _ := json.Marshal(me)
	return &presence{rdb: rdb, self: self, peers: peers, me: me, meJSON: string(b), expiry: expiry}
}

// beat renews the announcement and returns the live peers, waiting at most
// the expiry.
func (p *presence) beat(ctx context.Context) ([]announcement, error) {
	ctx, cancel := context.WithTimeout(ctx, p.expiry)
	defer cancel()
	vals, err := heartbeat.Run(ctx, p.rdb, []string{p.self.set, p.self.info, p.peers.set, p.peers.info},
		p.me.Name, p.expiry.Milliseconds(), p.meJSON).Slice()
	if err != nil {
		return nil, err
	}
	peers := make([]announcement, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired between ZRANGE and HMGET: impossible in a script, but harmless
		}
		var a announcement
		if json.Unmarshal([]byte(s), &a) == nil {
			peers = append(peers, a)
		}
	}
	return peers, nil
}

// leave withdraws the announcement, so that peers see at once that it is
// gone; it tries for at most a second.
func (p *presence) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZRem(ctx, p.self.set, p.me.Name)
		pipe.HDel(ctx, p.self.info, p.me.Name)
		return nil
	})
}

// errPaused is what a heartbeat skipped while Redis is known to be down
// reports. Skipping matters: a failed dial per heartbeat would soon trip the
// Redis client's dial circuit breaker, which then retries only once a second.
var errPaused = errors.New("heartbeat paused: broker unreachable")

// run calls beat every interval, and at once when kicked (as when Redis is
// back), until ctx is done, handing each outcome to seen, or errPaused
// without trying while paused says so. (Callers beat once themselves first.)
func (p *presence) run(ctx context.Context, interval time.Duration, kick <-chan struct{}, paused func() bool, seen func([]announcement, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-kick:
		case <-ctx.Done():
			return
		}
		if paused() {
			seen(nil, errPaused)
			continue
		}
		peers, err := p.beat(ctx)
		if ctx.Err() != nil {
			return
		}
		seen(peers, err)
	}
}

// mismatchLog logs, on one side, the peers that do not serve its model as
// it does: once when only peers of other models are live (and again when
// they change), and once per peer of its model with another fingerprint.
type mismatchLog struct {
	me     announcement
	side   string // "worker" or "frontend": what the peers are
	then   string // what follows when no peer serves our model
	alone  string // the last logged others string, "" when not alone
	warned map[string]bool
}

// seen logs what a heartbeat showed (v, from viewOf). Unless believe, a
// lack of peers of our model is not logged yet.
func (l *mismatchLog) seen(log *slog.Logger, v peerView, believe bool) {
	if l.warned == nil {
		l.warned = map[string]bool{}
	}
	for _, p := range v.same {
		if key := p.Name + "\x00" + p.Fingerprint; p.Fingerprint != l.me.Fingerprint && !l.warned[key] {
			l.warned[key] = true
			log.Warn(fmt.Sprintf("a %s of model %s has another fingerprint: the same name, a different model", l.side, l.me.model()),
				l.side, p.Name, "host", p.Host, "its_fingerprint", p.Fingerprint, "fingerprint", l.me.Fingerprint)
		}
	}
	switch others := v.othersString(); {
	case len(v.same) > 0 || len(v.others) == 0:
		l.alone = ""
	case believe && others != l.alone:
		l.alone = others
		log.Warn(fmt.Sprintf("no live %s serves model %s, only other models: %s; start one with the same --model, or fix this one's",
			l.side, l.me.model(), l.then), "model", l.me.model(), "other_models", others)
	}
}

// drainMeter measures how fast a stream drains from successive looks at it:
// the entries ever added to it and its length. Only the intervals at whose
// start and end it held items count: the workers may have idled in the
// others, which then say little about how fast they drain a backlog. Older
// intervals weigh less, with a time constant of drainTau.
type drainMeter struct {
	at            time.Time
	added, length int64
	items, secs   float64 // exponentially weighted sums over busy intervals
	primed        bool
}

const drainTau = 3 * time.Second

func (m *drainMeter) observe(now time.Time, added, length int64) {
	drained := (added - length) - (m.added - m.length)
	dt := now.Sub(m.at).Seconds()
	// A stream that shrank in entries-added was recreated (Redis restarted
	// without its data): start over.
	if m.primed && added >= m.added && drained >= 0 && dt > 0 && m.length > 0 && length > 0 {
		w := math.Exp(-dt / drainTau.Seconds())
		m.items = m.items*w + float64(drained)
		m.secs = m.secs*w + dt
	}
	m.at, m.added, m.length, m.primed = now, added, length, true
}

// rate returns the measured items per second; 0 before any busy interval.
func (m *drainMeter) rate() float64 {
	if m.secs == 0 {
		return 0
	}
	return m.items / m.secs
}
