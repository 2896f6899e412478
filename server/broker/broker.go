// Package broker is infer's distributed mode: a transport over Redis Streams
// between frontends, which admit requests, and workers, which run the model.
//
// A Frontend implements the encoder API's Scheduler (server/encoder): it adds
// each item of a request to the model's request stream, with the request's
// deadline and the address of the frontend's reply list, and waits for the
// results. A Worker reads the stream through a consumer group, forms batches
// with server/batch (the same batching policies as in-process), runs the
// model, pushes each result to the frontend that owns the request, and only
// then acknowledges the entry. A Worker is a service of the host (package
// server), as the APIs of infer serve are: the host serves its /metrics,
// /healthz and /readyz.
//
// Nothing is lost when a worker dies: the entries it had read stay pending in
// the group and another worker claims them after Config.Visibility. Results
// are keyed by request id and item index, so a duplicate result is ignored.
// Entries whose deadline has passed are answered with a deadline error and
// acknowledged without compute; so are entries whose client went away (the
// frontend withdraws them, and tells the workers that read them already).
// Admission is bounded by the stream's length (entries waiting or being
// computed); nothing unprocessed is ever trimmed.
//
// Frontends and workers announce themselves every Config.Heartbeat: the model
// they serve (name, task and Fingerprint). A frontend with no live worker for
// its model is not ready and refuses requests with ErrNoWorkers; a frontend
// or worker that sees only peers of other models, or of another fingerprint,
// logs it.
//
// Keys, for a prefix P (Config.Prefix) and a model named M with task T:
//
//	P:M:T:requests   stream, one entry per item: req, item, reply, deadline, input
//	                 consumer group "workers"
//	P:M:T:cancel     channel: ids of withdrawn entries, for the workers that hold them
//	P:reply:<id>     list per frontend: its results, expiring when unused
//	P:workers        sorted set of live workers' names, by expiry (Redis's clock)
//	P:workers:info   hash: each live worker's announcement, as JSON
//	P:frontends, P:frontends:info   the same for frontends
//
// Redis 7.0 or later is needed (BLMPOP, XAUTOCLAIM, XINFO STREAM's
// entries-added). This package is the only importer of go-redis.
package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

var (
	// ErrUnavailable is returned when Redis cannot be reached, or when the
	// connection was lost while a request waited (its outcome is then
	// unknown and retrying it is safe).
	ErrUnavailable error = &unavailableError{code: "unavailable", msg: "broker unavailable"}
	// ErrNoWorkers is returned when no live worker serves the frontend's
	// model: none announced itself within the last four heartbeats, or
	// those that did serve another model. Requests waiting when the last
	// worker goes fail with it too; retrying later is safe.
	ErrNoWorkers error = &unavailableError{code: "no_workers", msg: "no live worker serves the model"}
)

// unavailableError is a reason why a frontend cannot serve for now. It
// matches batch.ErrClosed, so that a server refuses such requests with 503
// without knowing about brokers, and names its error code and a message fit
// for clients (no addresses) with Unavailable.
type unavailableError struct{ code, msg string }

func (e *unavailableError) Error() string { return e.msg }
func (e *unavailableError) Unwrap() error { return batch.ErrClosed }

// Unavailable returns the error code and message a server answers with.
func (e *unavailableError) Unavailable() (code, message string) {
	return e.code, e.msg + "; retry later"
}

// Config is what frontends and workers share. The zero value uses a local
// Redis.
type Config struct {
	// URL locates Redis: redis://[user:pass@]host:port/db, or rediss://…
	// for TLS. Default DefaultURL.
	URL string
	// Prefix starts every key, so that deployments can share one Redis.
	// Frontends and workers of one deployment must agree on it. Default
	// "infer".
	Prefix string
	// Poll is how long a blocking read waits before it looks for shutdown;
	// it bounds how long Run takes to return. Default 1s.
	Poll time.Duration
	// Heartbeat is how often frontends and workers announce themselves and
	// look at each other. An announcement not renewed within four
	// heartbeats expires: a frontend then counts a killed or frozen worker
	// as gone, turns /readyz to 503 and refuses requests with ErrNoWorkers
	// if it was the last one of its model. A worker that stops leaves at
	// once. Default 250ms: about a second from a worker's death to 503s.
	Heartbeat time.Duration
	// Logger receives connection and recovery events; nil discards them.
	Logger *slog.Logger
}

// CommandTimeout bounds how long a Redis command waits for its answer: past
// it the connection counts as lost (a 503 unavailable for the requests in
// flight, and refusals until Redis answers again).
const CommandTimeout = time.Second

// DefaultURL is Config.URL's default: a Redis on this host.
const DefaultURL = "redis://127.0.0.1:6379/0"

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Prefix == "" {
		c.Prefix = "infer"
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 250 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a URL that does not parse, before anything is loaded or
// connected. (NewFrontend and NewWorker check it too.)
func (c Config) Validate() error {
	_, err := c.withDefaults().options()
	return err
}

const group = "workers"

// expiry is how long an announcement lives without renewal.
func (c Config) expiry() time.Duration { return 4 * c.Heartbeat }

// modelKey names a model as frontends and workers meet on it: its name and
// task, as in "sim:classify".
func modelKey(m models.Info) string {
	if m.Task == "" {
		return m.Name
	}
	return m.Name + ":" + m.Task
}

// stream is the key of the request stream of a model: frontends and workers
// meet on it when they serve the same model name and task.
func (c Config) stream(m models.Info) string { return c.Prefix + ":" + modelKey(m) + ":requests" }

// cancelChannel is where frontends name the entries of a model's stream
// whose clients went away.
func (c Config) cancelChannel(m models.Info) string { return c.Prefix + ":" + modelKey(m) + ":cancel" }

// client returns a Redis client for c.URL. It does not connect yet.
func (c Config) client() (*redis.Client, error) {
	opt, err := c.options()
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// options are the Redis client's options for c.URL.
func (c Config) options() (*redis.Options, error) {
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("broker url: %w", err)
	}
	// Every failure is seen at once: the broker decides what to retry, and
	// a frontend must answer quickly while Redis is away.
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout = 2 * time.Second
	// A frozen Redis (stopped, swapping, a partition that drops packets)
	// is noticed when a command gets no answer within CommandTimeout. A
	// blocking read blocks for less (see Frontend.pop); go-redis adds its
	// block time to the deadline of XREADGROUP.
	opt.ReadTimeout = CommandTimeout
	opt.WriteTimeout = CommandTimeout
	opt.ContextTimeoutEnabled = true
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// LogClientTo sends the log lines of the Redis client library to logger at
// debug level; nil discards them. The library's logger is process-wide, and
// by default it writes every failed dial to stderr; the broker logs outages
// itself, once each.
func LogClientTo(logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(clientLog{logger})
}

type clientLog struct{ l *slog.Logger }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	if c.l.Enabled(ctx, slog.LevelDebug) {
		c.l.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
	}
}

// Stream entry fields.
const (
	fieldReq      = "req"      // request id, unique within its frontend
	fieldItem     = "item"     // index of the item in its request
	fieldReply    = "reply"    // key of the owning frontend's reply list
	fieldDeadline = "deadline" // Unix milliseconds; 0: none
	fieldInput    = "input"    // models.Input as JSON
)

// entry is one item read from the request stream.
type entry struct {
	id       string // stream entry id
	req      string
	item     int
	reply    string
	deadline time.Time // zero: none
	in       models.Input
}

func parseEntry(m redis.XMessage) (entry, error) {
	e := entry{id: m.ID}
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e.req, e.reply = str(fieldReq), str(fieldReply)
	if e.req == "" || e.reply == "" {
		return e, fmt.Errorf("entry %s: no request id or reply key", m.ID)
	}
	var err error
	if e.item, err = strconv.Atoi(str(fieldItem)); err != nil {
		return e, fmt.Errorf("entry %s: item: %w", m.ID, err)
	}
	ms, err := strconv.ParseInt(str(fieldDeadline), 10, 64)
	if err != nil {
		return e, fmt.Errorf("entry %s: deadline: %w", m.ID, err)
	}
	if ms > 0 {
		e.deadline = time.UnixMilli(ms)
	}
	if err := json.Unmarshal([]byte(str(fieldInput)), &e.in); err != nil {
		return e, fmt.Errorf("entry %s: input: %w", m.ID, err)
	}
	return e, nil
}

func (e *entry) expired(now time.Time) bool {
	return !e.deadline.IsZero() && !now.Before(e.deadline)
}

// Result codes: why an item has no output.
const (
	codeExpired   = "expired"   // deadline passed before compute
	codeInvalid   = "invalid"   // models.ErrInvalidInput
	codeTooLong   = "too_long"  // models.ErrInputTooLong
	codeModel     = "model"     // the model failed on it
	codeAbandoned = "abandoned" // delivered too often: workers died on it
)

// Output kinds, so that a frontend returns the Go types the server packs
// specially (strings, float32 vectors) and JSON for anything else.
const (
	kindJSON   = ""
	kindString = "string"
	kindF32    = "f32"
)

// result is one item's answer, pushed to its frontend's reply list as JSON.
type result struct {
	id      string          // the stream entry it answers
	to      string          // the reply list it goes to
	Req     string          `json:"req"`
	Item    int             `json:"item"`
	Kind    string          `json:"kind,omitempty"`
	Out     json.RawMessage `json:"out,omitempty"`
	Code    string          `json:"code,omitempty"`
	Err     string          `json:"err,omitempty"`
	Compute int64           `json:"compute_us,omitempty"`
	Batch   int             `json:"batch,omitempty"`
}

// answer returns e's result: out, or err when it is not nil.
func answer(e *entry, out models.Output, err error) result {
	r := result{id: e.id, to: e.reply, Req: e.req, Item: e.item}
	if err != nil {
		r.Code, r.Err = errorCode(err), err.Error()
		return r
	}
	switch out.(type) {
	case string:
		r.Kind = kindString
	case []float32:
		r.Kind = kindF32
	}
	b, err := json.Marshal(out)
	if err != nil {
		r.Kind, r.Code, r.Err = kindJSON, codeModel, fmt.Sprintf("encode output: %v", err)
		return r
	}
	r.Out = b
	return r
}

func errorCode(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codeExpired
	case errors.Is(err, models.ErrInputTooLong):
		return codeTooLong
	case errors.Is(err, models.ErrInvalidInput):
		return codeInvalid
	default:
		return codeModel
	}
}

// output decodes r's output into the Go value the worker's model returned,
// or its JSON for types other than strings and float32 vectors.
func (r *result) output() (models.Output, error) {
	switch r.Kind {
	case kindString:
		var s string
		err := json.Unmarshal(r.Out, &s)
		return s, err
	case kindF32:
		var v []float32
		err := json.Unmarshal(r.Out, &v)
		return v, err
	default:
		return r.Out, nil
	}
}

// err rebuilds the error of a failed item, so that the server maps it as it
// would an in-process one.
func (r *result) err() error {
	switch r.Code {
	case codeExpired:
		return context.DeadlineExceeded
	case codeInvalid:
		return &remoteError{msg: r.Err, kind: models.ErrInvalidInput}
	case codeTooLong:
		return &remoteError{msg: r.Err, kind: models.ErrInputTooLong}
	default:
		return &remoteError{msg: r.Err}
	}
}

// remoteError is an item error reported by a worker.
type remoteError struct {
	msg  string
	kind error // a models sentinel, or nil
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// isNoGroup reports whether err says the consumer group (or the stream) does
// not exist, as after Redis restarted without its data.
func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isServerError reports whether err is an error reply from Redis rather than
// a failure to reach it.
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// backoff is a capped exponential delay for retries while Redis is away.
type backoff struct{ d time.Duration }

// maxBackoff is the longest delay between retries: a frontend or worker
// notices that Redis is back within it.
const maxBackoff = 500 * time.Millisecond

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 50*time.Millisecond), maxBackoff)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
