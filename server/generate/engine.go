package generate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/models"
)

var (
	// ErrQueueFull is returned when Config.QueueCap requests are already
	// waiting. Nothing was admitted.
	ErrQueueFull = errors.New("generate: queue full")
	// ErrWouldMissDeadline is returned when the backlog ahead of a request
	// means it would not start before its context's deadline. It wraps
	// ErrQueueFull: the remedy is the same, retry later.
	ErrWouldMissDeadline = fmt.Errorf("%w: the backlog would outlast the request's deadline", ErrQueueFull)
	// ErrClosed is returned once the engine has stopped admitting.
	ErrClosed = errors.New("generate: closed")
	// ErrInvalidRequest marks a request the engine cannot run as given
	// (empty prompt, negative or inconsistent lengths, bad stop strings).
	ErrInvalidRequest = errors.New("generate: invalid request")
	// ErrPromptTooLong marks a prompt that leaves no room in the model's
	// context for a single generated token.
	ErrPromptTooLong = errors.New("generate: prompt too long for the context")
	// ErrMaxTokensTooLarge marks a request whose prompt plus MaxTokens
	// exceeds the model's context.
	ErrMaxTokensTooLarge = errors.New("generate: prompt plus max tokens exceeds the context")
	// ErrSlowReader ends a sequence whose stream reader fell more than
	// Config.StreamBuffer tokens behind.
	ErrSlowReader = errors.New("generate: stream reader too slow")
	// ErrDecoder wraps a decoder failure; the sequences of the failed step
	// end with it.
	ErrDecoder = errors.New("generate: decoder failed")
)

// Limits on a request's stop strings and cache salt.
const (
	MaxStops     = 16
	MaxStopLen   = 256 // bytes
	MaxCacheSalt = 256 // bytes
)

// Request is one generation request.
type Request struct {
	// Prompt is the tokenized prompt; not empty. The engine keeps its own
	// copy.
	Prompt []int32
	// MaxTokens is the most tokens to generate; 0 means up to the
	// context.
	MaxTokens int
	// MinTokens is the fewest tokens to generate before EOS or a stop
	// string may end the sequence (an EOS drawn earlier counts as a token
	// without text).
	MinTokens int
	// IgnoreEOS keeps generating past EOS, up to MaxTokens (vLLM's
	// extension, for benchmarks that need exact lengths).
	IgnoreEOS bool
	// Stop strings end the sequence where they first appear in the
	// generated text, across token boundaries; they are not part of the
	// released text. At most MaxStops, each 1 to MaxStopLen bytes.
	Stop []string
	// Sampling is passed to the decoder.
	Sampling models.Sampling
	// CacheSalt, if set, confines the request's use of the prefix cache
	// to requests with the same salt (vLLM's cache_salt): a tenant's
	// requests cannot find, or time, another's cached prompts. At most
	// MaxCacheSalt bytes.
	CacheSalt string
}

// Engine schedules generation steps over one decoder instance. Its methods
// are safe for concurrent use; Run must be running for work to be done.
type Engine struct {
	dec  models.Decoder
	info models.DecoderInfo
	tok  models.Tokenizer
	ctok models.ContextTokenizer // tok, if its bytes depend on the token before
	cfg  atomic.Pointer[Config]

	mu       sync.Mutex // guards incoming and closed
	incoming []*seq
	closed   bool
	wake     chan struct{} // capacity 1

	queued    atomic.Int64 // waiting requests (incoming and waiting)
	nrunning  atomic.Int64
	kvUsed    atomic.Int64 // blocks in use
	kvBlocks  atomic.Int64 // blocks in all
	cancelled atomic.Int64 // sequences whose context ended, not yet swept
	life      atomic.Int64 // EWMA of a sequence's running time, ns
	started   atomic.Bool

	// Owned by Run's goroutine.
	waiting []*seq // FCFS; preempted sequences return to the front
	running []*seq // in admission order
	pool    *blockPool
	seed    maphash.Seed
	hits    []int32 // scratch: the cached blocks a waiting request would start after
	nextID  models.SeqID
	steps   []models.StepSeq
	stepOf  []*seq
	next    []int32
	pad     []int32 // the token fed to a static batch's finished rows
}

// seq is one request's sequence.
type seq struct {
	id        models.SeqID
	req       Request
	maxTokens int     // effective
	tokens    []int32 // prompt, then generated
	promptLen int
	computed  int // tokens in the decoder's KV
	planned   int // tokens scheduled in the step being planned
	generated int
	cached    int // prompt tokens found cached at its first start
	text      text
	out       *Stream
	gone      atomic.Bool // its context is done: goneErr is set
	goneErr   error       // the context's error; written before gone
	stopAfter func() bool

	// Its KV blocks: blocks[i] holds positions [i·size, (i+1)·size), the
	// first cachedBlocks of them known to be cached. hashes are the
	// chained hashes of its full blocks of tokens, at block size hashSize.
	blocks       []int32
	cachedBlocks int
	hashes       []uint64
	hashSize     int

	arrived  time.Time
	admitted time.Time // first admission
	idle     bool      // static: finished, still computed until its batch ends
	preempts int
	finish   FinishReason
}

func (s *seq) prefilling() bool {
	return s.computed < len(s.tokens)-1 || (s.computed == 0 && len(s.tokens) > 0)
}

// New returns an engine over dec, a model described by info whose text
// tok decodes. The engine does not close dec.
func New(cfg Config, dec models.Decoder, info models.DecoderInfo, tok models.Tokenizer) (*Engine, error) {
	cfg = cfg.WithModelDefaults(info.Engine)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if info.Context <= 1 || info.KVTokens <= 0 {
		return nil, fmt.Errorf("decoder info: context %d, KV tokens %d: want a context of 2 or more and a KV capacity", info.Context, info.KVTokens)
	}
	if err := cfg.CheckModel(info); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(info.KVTokens)
	if err := checkBlocks(cfg, info); err != nil {
		return nil, err
	}
	cfg.NoPrefixCache = cfg.NoPrefixCache || !info.BlockKV
	e := &Engine{dec: dec, info: info, tok: tok, wake: make(chan struct{}, 1), pad: []int32{info.EOS}, seed: maphash.MakeSeed()}
	e.ctok, _ = tok.(models.ContextTokenizer)
	e.pool = newBlockPool(cfg.BlockSize, cfg.KVTokens, e.seed)
	e.kvBlocks.Store(int64(e.pool.total()))
	e.cfg.Store(&cfg)
	return e, nil
}

// checkBlocks says whether a sequence of the whole context fits in the KV
// at cfg's block size.
func checkBlocks(cfg Config, info models.DecoderInfo) error {
	blocks, need := cfg.KVTokens/cfg.BlockSize, (info.Context+cfg.BlockSize-1)/cfg.BlockSize
	if blocks < need {
		return fmt.Errorf("block size %d: the KV's %d tokens make %d blocks, and a sequence of the model's context (%d tokens) needs %d", cfg.BlockSize, cfg.KVTokens, blocks, info.Context, need)
	}
	return nil
}

// Config returns the configuration in effect, defaults filled in.
func (e *Engine) Config() Config { return *e.cfg.Load() }

// Reconfigure changes Policy, MaxSeqs, MaxBatchedTokens, MaxLatency,
// BlockSize and NoPrefixCache from the next step on; the other fields keep
// their values. Zero fields take their defaults, the model's first.
// Switching to Static makes the running sequences one batch that nobody
// joins; switching away from it drops its finished rows. Turning the prefix
// cache off forgets what it holds. A new block size empties the KV: the
// running sequences are preempted, to be recomputed on the new blocks.
func (e *Engine) Reconfigure(c Config) error {
	c = c.WithModelDefaults(e.info.Engine)
	if err := c.Validate(); err != nil {
		return err
	}
	n := *e.cfg.Load()
	d := Config{Policy: c.Policy, MaxSeqs: c.MaxSeqs, MaxBatchedTokens: c.MaxBatchedTokens, MaxLatency: c.MaxLatency, BlockSize: c.BlockSize}.withDefaults(n.KVTokens)
	n.Policy, n.MaxSeqs, n.MaxBatchedTokens, n.MaxLatency, n.BlockSize = d.Policy, d.MaxSeqs, d.MaxBatchedTokens, d.MaxLatency, d.BlockSize
	n.NoPrefixCache = c.NoPrefixCache || !e.info.BlockKV
	if err := checkBlocks(n, e.info); err != nil {
		return err
	}
	e.cfg.Store(&n)
	e.signal()
	return nil
}

// Waiting returns the number of requests waiting to start.
func (e *Engine) Waiting() int { return int(e.queued.Load()) }

// Running returns the number of running sequences.
func (e *Engine) Running() int { return int(e.nrunning.Load()) }

// KVUsage returns the fraction of the KV blocks in use (held by running
// sequences; cached blocks nobody holds are free), 0 to 1.
func (e *Engine) KVUsage() float64 {
	return float64(e.kvUsed.Load()) / float64(e.kvBlocks.Load())
}

// Backlog estimates how long the waiting requests need to start, from the
// measured running time of sequences; zero until some finished. It is what
// a Retry-After should say.
func (e *Engine) Backlog() time.Duration {
	d, _ := e.startEstimate(e.cfg.Load(), int(e.queued.Load()), 0)
	return d
}

// startEstimate predicts how long the q-th waiting request waits before it
// starts: under Continuous a slot frees every life/maxSeqs on average; under
// Static whole batches go by. life is the measured running time of a
// sequence; until one finished, coldLife (0: none known).
func (e *Engine) startEstimate(cfg *Config, q int, coldLife time.Duration) (time.Duration, bool) {
	life := time.Duration(e.life.Load())
	if life <= 0 {
		life = coldLife
	}
	if life <= 0 {
		return 0, false
	}
	slots := cfg.maxSeqs()
	if cfg.Policy == Static {
		return time.Duration(math.Ceil(float64(q)/float64(slots))) * life, true
	}
	ahead := q - (slots - int(e.nrunning.Load()))
	if ahead <= 0 {
		return 0, true
	}
	return time.Duration(ahead) * life / time.Duration(slots), true
}

// Generate admits a request and returns its stream. It fails at once with
// ErrQueueFull, ErrWouldMissDeadline, ErrClosed, or a validation error
// (ErrInvalidRequest, ErrPromptTooLong, ErrMaxTokensTooLarge). The
// sequence lives until it finishes or ctx is done: a cancelled or expired
// ctx removes it at the next step and frees its KV.
func (e *Engine) Generate(ctx context.Context, req Request) (*Stream, error) {
	maxTokens, err := e.check(&req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := e.cfg.Load()
	now := time.Now()
	s := &seq{
		req:       req,
		maxTokens: maxTokens,
		promptLen: len(req.Prompt),
		out:       newStream(cfg.StreamBuffer),
		arrived:   now,
	}
	s.tokens = make([]int32, len(req.Prompt), len(req.Prompt)+min(maxTokens, 256))
	copy(s.tokens, req.Prompt)
	s.req.Prompt = nil
	for _, stop := range req.Stop {
		s.text.stops = append(s.text.stops, []byte(stop))
	}

	s.stopAfter = context.AfterFunc(ctx, func() {
		s.goneErr = ctx.Err()
		s.gone.Store(true)
		e.cancelled.Add(1)
		e.signal()
	})
	if err := e.enqueue(ctx, cfg, s, now); err != nil {
		s.stopAfter()
		return nil, err
	}
	e.signal()
	return s.out, nil
}

// enqueue admits s to the waiting queue, or refuses it.
func (e *Engine) enqueue(ctx context.Context, cfg *Config, s *seq, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	q := e.queued.Add(1)
	if q > int64(cfg.QueueCap) {
		e.queued.Add(-1)
		return ErrQueueFull
	}
	if deadline, ok := ctx.Deadline(); ok && !cfg.AdmitLate {
		if wait, ok := e.startEstimate(cfg, int(q), cfg.ColdStep*time.Duration(s.maxTokens)); ok && now.Add(wait).After(deadline) {
			e.queued.Add(-1)
			return ErrWouldMissDeadline
		}
	}
	e.incoming = append(e.incoming, s)
	return nil
}

// check validates req and returns its effective max tokens.
func (e *Engine) check(req *Request) (int, error) {
	n, ctxLen := len(req.Prompt), e.info.Context
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case n >= ctxLen:
		return 0, fmt.Errorf("%w: the prompt has %d tokens; the context holds %d, prompt and at least one generated token", ErrPromptTooLong, n, ctxLen)
	case req.MaxTokens < 0:
		return 0, fmt.Errorf("%w: max tokens %d is negative", ErrInvalidRequest, req.MaxTokens)
	case req.MinTokens < 0:
		return 0, fmt.Errorf("%w: min tokens %d is negative", ErrInvalidRequest, req.MinTokens)
	case n+req.MaxTokens > ctxLen:
		return 0, fmt.Errorf("%w: %d prompt tokens + %d max tokens > context %d", ErrMaxTokensTooLarge, n, req.MaxTokens, ctxLen)
	case len(req.Stop) > MaxStops:
		return 0, fmt.Errorf("%w: %d stop strings; at most %d", ErrInvalidRequest, len(req.Stop), MaxStops)
	case len(req.CacheSalt) > MaxCacheSalt:
		return 0, fmt.Errorf("%w: cache salt of %d bytes; at most %d", ErrInvalidRequest, len(req.CacheSalt), MaxCacheSalt)
	}
	for _, s := range req.Stop {
		if len(s) == 0 || len(s) > MaxStopLen {
			return 0, fmt.Errorf("%w: stop string of %d bytes; want 1 to %d", ErrInvalidRequest, len(s), MaxStopLen)
		}
	}
	for _, t := range req.Prompt {
		if t < 0 || (e.info.Vocab > 0 && int(t) >= e.info.Vocab) {
			return 0, fmt.Errorf("%w: token id %d outside the vocabulary", ErrInvalidRequest, t)
		}
	}
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = ctxLen - n
	}
	if req.MinTokens > maxTokens {
		return 0, fmt.Errorf("%w: min tokens %d exceeds max tokens %d", ErrInvalidRequest, req.MinTokens, maxTokens)
	}
	return maxTokens, nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run runs steps until ctx is done. Then it stops admitting (Generate
// returns ErrClosed), finishes every admitted request, and returns. The
// decoder's context is not cancelled by ctx. Run may be called once.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("generate: Run called twice")
	}
	stepCtx := context.WithoutCancel(ctx)
	stop := context.AfterFunc(ctx, func() { // refuse new work at once
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.signal()
	})
	defer stop()
	var timer *time.Timer
	draining := false
	for {
		draining = draining || ctx.Err() != nil
		e.intake()
		e.sweep()
		cfg := e.cfg.Load()
		if draining && len(e.waiting) == 0 && len(e.running) == 0 {
			return nil
		}
		wakeAt, ran := e.step(stepCtx, cfg, draining)
		if ran {
			continue
		}
		var timerC <-chan time.Time
		if !wakeAt.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(wakeAt))
			} else {
				timer.Reset(time.Until(wakeAt))
			}
			timerC = timer.C
		}
		done := ctx.Done()
		if draining {
			done = nil
		}
		select {
		case <-e.wake:
		case <-timerC:
		case <-done:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// intake moves newly admitted requests to the waiting queue.
func (e *Engine) intake() {
	e.mu.Lock()
	in := e.incoming
	e.incoming = nil
	e.mu.Unlock()
	for _, s := range in {
		if s.gone.Load() { // its context ended before the sweep could see it
			e.cancelled.Add(1)
		}
	}
	e.waiting = append(e.waiting, in...)
}

// sweep removes the sequences whose context ended, freeing their KV.
func (e *Engine) sweep() {
	if e.cancelled.Swap(0) == 0 {
		return
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(s *seq) bool {
		if !s.gone.Load() {
			return false
		}
		e.queued.Add(-1)
		e.end(s, s.goneErr)
		return true
	})
	e.running = slices.DeleteFunc(e.running, func(s *seq) bool {
		if !s.gone.Load() {
			return false
		}
		e.release(s)
		if !s.idle {
			e.end(s, s.goneErr)
		}
		return true
	})
	e.publish()
}

// release frees a running sequence's KV: its blocks stay cached unless
// evicted.
func (e *Engine) release(s *seq) {
	e.dec.Free(s.id)
	e.pool.drop(s)
	s.computed = 0
}

// end ends a sequence's stream: with its result when err is nil.
func (e *Engine) end(s *seq, err error) {
	if s.stopAfter != nil {
		s.stopAfter()
	}
	if err != nil {
		s.out.end(Result{}, err)
		return
	}
	s.out.end(Result{
		Finish:           s.finish,
		PromptTokens:     s.promptLen,
		CompletionTokens: s.generated,
		Timing:           s.out.Timing(),
		Preemptions:      s.preempts,
	}, nil)
}

// publish updates the gauges that other goroutines read. The KV goes
// first: a reader that sees the running count drop sees its KV gone too.
func (e *Engine) publish() {
	e.kvBlocks.Store(int64(e.pool.total()))
	e.kvUsed.Store(int64(e.pool.used()))
	e.nrunning.Store(int64(len(e.running)))
}
