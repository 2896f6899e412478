package generate

import (
	"context"
	"errors"
	"fmt"
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

// Limits on a request's stop strings.
const (
	MaxStops   = 16
	MaxStopLen = 256 // bytes
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
}

// Engine schedules generation steps over one decoder instance. Its methods
// are safe for concurrent use; Run must be running for work to be done.
type Engine struct {
	dec  models.Decoder
	info models.DecoderInfo
	tok  models.Tokenizer
	cfg  atomic.Pointer[Config]

	mu       sync.Mutex // guards incoming and closed
	incoming []*seq
	closed   bool
	wake     chan struct{} // capacity 1

	queued    atomic.Int64 // waiting requests (incoming and waiting)
	nrunning  atomic.Int64
	kvUsed    atomic.Int64
	cancelled atomic.Int64 // sequences whose context ended, not yet swept
	life      atomic.Int64 // EWMA of a sequence's running time, ns
	started   atomic.Bool

	// Owned by Run's goroutine.
	waiting []*seq // FCFS; preempted sequences return to the front
	running []*seq // in admission order
	kv      int    // tokens in the KV: sum of running[i].computed
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
	text      text
	out       *Stream
	gone      atomic.Bool // its context is done: goneErr is set
	goneErr   error       // the context's error; written before gone
	stopAfter func() bool

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
	e := &Engine{dec: dec, info: info, tok: tok, wake: make(chan struct{}, 1), pad: []int32{info.EOS}}
	e.cfg.Store(&cfg)
	return e, nil
}

// Config returns the configuration in effect, defaults filled in.
func (e *Engine) Config() Config { return *e.cfg.Load() }

// Reconfigure changes Policy, MaxSeqs, MaxBatchedTokens and MaxLatency from
// the next step on; the other fields keep their values. Zero fields take
// their defaults, the model's first. Switching to Static makes the running
// sequences one batch that nobody joins; switching away from it drops its
// finished rows.
func (e *Engine) Reconfigure(c Config) error {
	c = c.WithModelDefaults(e.info.Engine)
	if err := c.Validate(); err != nil {
		return err
	}
	n := *e.cfg.Load()
	d := Config{Policy: c.Policy, MaxSeqs: c.MaxSeqs, MaxBatchedTokens: c.MaxBatchedTokens, MaxLatency: c.MaxLatency}.withDefaults(n.KVTokens)
	n.Policy, n.MaxSeqs, n.MaxBatchedTokens, n.MaxLatency = d.Policy, d.MaxSeqs, d.MaxBatchedTokens, d.MaxLatency
	e.cfg.Store(&n)
	e.signal()
	return nil
}

// Waiting returns the number of requests waiting to start.
func (e *Engine) Waiting() int { return int(e.queued.Load()) }

// Running returns the number of running sequences.
func (e *Engine) Running() int { return int(e.nrunning.Load()) }

// KVUsage returns the fraction of the KV capacity in use, 0 to 1.
func (e *Engine) KVUsage() float64 {
	return float64(e.kvUsed.Load()) / float64(e.cfg.Load().KVTokens)
}

// Backlog estimates how long the waiting requests need to start, from the
// measured running time of sequences; zero until some finished. It is what
// a Retry-After should say.
func (e *Engine) Backlog() time.Duration {
	d, _ := e.startEstimate(e.cfg.Load(), int(e.queued.Load()))
	return d
}

// startEstimate predicts how long the q-th waiting request waits before it
// starts: under Continuous a slot frees every life/maxSeqs on average; under
// Static whole batches go by.
func (e *Engine) startEstimate(cfg *Config, q int) (time.Duration, bool) {
	life := time.Duration(e.life.Load())
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
		if wait, ok := e.startEstimate(cfg, int(q)); ok && now.Add(wait).After(deadline) {
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

// release frees a running sequence's KV.
func (e *Engine) release(s *seq) {
	e.dec.Free(s.id)
	e.kv -= s.computed
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
	e.kvUsed.Store(int64(e.kv))
	e.nrunning.Store(int64(len(e.running)))
}

// step plans and runs one step. It returns ran false when there was nothing
// to run, with the time to look again if a static batch is forming.
func (e *Engine) step(ctx context.Context, cfg *Config, draining bool) (time.Time, bool) {
	info := StepInfo{KVTokens: cfg.KVTokens}
	if cfg.Policy != Static {
		e.dropIdle()
	}
	var wakeAt time.Time
	if cfg.Policy == Static {
		wakeAt = e.planStatic(cfg, draining, &info)
	} else {
		e.planContinuous(cfg, &info)
	}
	e.steps, e.stepOf = e.steps[:0], e.stepOf[:0]
	for _, s := range e.running {
		if s.planned == 0 {
			continue
		}
		st := models.StepSeq{ID: s.id, Past: s.computed, PromptLen: s.promptLen, Sampling: s.req.Sampling}
		if s.idle {
			st.Tokens, st.Sample = e.pad, true
		} else {
			st.Tokens = s.tokens[s.computed : s.computed+s.planned]
			st.Sample = s.computed+s.planned == len(s.tokens)
		}
		if len(st.Tokens) == 1 && st.Past >= s.promptLen {
			info.Decodes++
		} else {
			info.PrefillTokens += len(st.Tokens)
		}
		if s.idle {
			info.Idle++
		}
		e.steps = append(e.steps, st)
		e.stepOf = append(e.stepOf, s)
	}
	if len(e.steps) == 0 {
		e.publish()
		return wakeAt, false
	}
	info.Seqs = len(e.steps)
	e.publish()
	if cap(e.next) < len(e.steps) {
		e.next = make([]int32, len(e.steps))
	}
	next := e.next[:len(e.steps)]
	start := time.Now()
	err := e.call(ctx, next)
	info.Duration = time.Since(start)
	e.apply(cfg, next, err, &info)
	e.publish()
	info.Running, info.Waiting, info.KVUsed = len(e.running), len(e.waiting), e.kv
	if cfg.OnStep != nil {
		cfg.OnStep(info)
	}
	return time.Time{}, true
}

// call runs the decoder's step, turning a panic into an error.
func (e *Engine) call(ctx context.Context, next []int32) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panicked: %v", r)
		}
	}()
	return e.dec.Step(ctx, e.steps, next)
}

// planner tracks the budget of the step being planned.
type planner struct {
	e       *Engine
	budget  int
	kvFree  int
	preempt int
}

// reserve makes room in the KV for n more tokens of s, preempting the most
// recently admitted running sequences as needed. It returns false when s
// itself was preempted.
func (p *planner) reserve(s *seq, n int) bool {
	for p.kvFree < n {
		v := p.e.running[len(p.e.running)-1]
		p.kvFree += v.computed + v.planned
		p.budget += v.planned
		p.e.preemptLast()
		p.preempt++
		if v == s {
			return false
		}
	}
	return true
}

// planContinuous schedules running decodes first, then the running
// sequences' prompt chunks, then (unless it preempted) admits waiting
// requests in arrival order while the budget, MaxSeqs and the KV allow.
func (e *Engine) planContinuous(cfg *Config, info *StepInfo) {
	p := &planner{e: e, budget: cfg.MaxBatchedTokens, kvFree: cfg.KVTokens - e.kv}
	decodes := func() {
		for i := 0; i < len(e.running); i++ {
			s := e.running[i]
			if s.prefilling() {
				continue
			}
			if !p.reserve(s, 1) {
				break
			}
			s.planned = 1
			p.kvFree--
			p.budget--
		}
	}
	prefills := func() {
		for i := 0; i < len(e.running) && p.budget > 0; i++ {
			s := e.running[i]
			if !s.prefilling() || s.planned > 0 {
				continue
			}
			n := min(len(s.tokens)-s.computed, p.budget)
			if !p.reserve(s, n) {
				break
			}
			s.planned = n
			p.kvFree -= n
			p.budget -= n
		}
	}
	if cfg.SeparatePrefill {
		prefills()
		e.admit(cfg, p)
		if p.preempt == 0 && !e.anyPlanned() {
			decodes()
		}
	} else {
		decodes()
		prefills()
		if p.preempt == 0 {
			e.admit(cfg, p)
		}
	}
	info.Preempted = p.preempt
}

func (e *Engine) anyPlanned() bool {
	for _, s := range e.running {
		if s.planned > 0 {
			return true
		}
	}
	return false
}

// admit starts waiting requests in arrival order (a preempted sequence first):
// the head is admitted when a slot and budget are free and its whole prompt
// (with the tokens it had generated, after a preemption), plus one token of
// headroom for each running sequence, fits in the free KV. The head is never
// skipped, so a long prompt is not starved by shorter ones behind it.
func (e *Engine) admit(cfg *Config, p *planner) {
	for len(e.waiting) > 0 && len(e.running) < cfg.maxSeqs() && p.budget > 0 {
		w := e.waiting[0]
		need := len(w.tokens)
		if need+len(e.running)+1 > p.kvFree {
			return
		}
		n := min(need, p.budget)
		e.start(w)
		w.planned = n
		p.kvFree -= n
		p.budget -= n
	}
}

// start moves the head of the waiting queue to the running set.
func (e *Engine) start(w *seq) {
	e.waiting = e.waiting[1:]
	e.queued.Add(-1)
	e.nextID++
	w.id = e.nextID
	w.computed = 0
	if w.admitted.IsZero() {
		w.admitted = time.Now()
	}
	e.running = append(e.running, w)
}

// preemptLast preempts the most recently admitted running sequence: its KV
// is freed and it returns to the front of the waiting queue, to be
// recomputed from its prompt and generated tokens.
func (e *Engine) preemptLast() {
	v := e.running[len(e.running)-1]
	e.running = e.running[:len(e.running)-1]
	e.release(v)
	v.planned = 0
	v.preempts++
	e.waiting = slices.Insert(e.waiting, 0, v)
	e.queued.Add(1)
}

// dropIdle removes a static batch's finished rows (after a switch away
// from Static).
func (e *Engine) dropIdle() {
	e.running = slices.DeleteFunc(e.running, func(s *seq) bool {
		if s.idle {
			e.release(s)
			return true
		}
		return false
	})
}

// planStatic forms a batch when none runs, within MaxLatency of the first
// waiting request's arrival, and steps every row of the running batch,
// finished or not. It returns when to look again while a batch forms.
func (e *Engine) planStatic(cfg *Config, draining bool, info *StepInfo) time.Time {
	if !slices.ContainsFunc(e.running, func(s *seq) bool { return !s.idle }) {
		// Every row left (finished, or its client went away): the batch
		// is over.
		for _, s := range e.running {
			e.release(s)
		}
		e.running = e.running[:0]
	}
	if len(e.running) == 0 {
		if len(e.waiting) == 0 {
			return time.Time{}
		}
		slots := cfg.maxSeqs()
		if until := e.waiting[0].arrived.Add(cfg.MaxLatency); len(e.waiting) < slots && !draining && time.Now().Before(until) {
			return until
		}
		// Reserve what the batch can grow to: every row runs until the
		// longest answer is done.
		prompts, longest := 0, 0
		for len(e.waiting) > 0 && len(e.running) < slots {
			w := e.waiting[0]
			l := max(longest, w.maxTokens-w.generated)
			if len(e.running) > 0 && prompts+len(w.tokens)+(len(e.running)+1)*l > cfg.KVTokens {
				break
			}
			prompts += len(w.tokens)
			longest = l
			e.start(w)
			w.planned = len(w.tokens)
		}
		return time.Time{}
	}
	// The batch runs: every row steps, the finished ones on padding.
	p := &planner{e: e, budget: math.MaxInt, kvFree: cfg.KVTokens - e.kv}
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		n := 1
		if s.prefilling() && !s.idle {
			n = len(s.tokens) - s.computed
		}
		if s.idle && s.computed+1 > e.info.Context {
			continue // a finished row stops growing at the context
		}
		if !p.reserve(s, n) {
			break
		}
		s.planned = n
		p.kvFree -= n
	}
	info.Preempted = p.preempt
	return time.Time{}
}

// apply takes a step's results: it records the sampled tokens, streams them,
// and removes the sequences that finished.
func (e *Engine) apply(cfg *Config, next []int32, err error, info *StepInfo) {
	now := time.Now()
	if err != nil {
		info.Err = err
		err = fmt.Errorf("%w: %v", ErrDecoder, err)
	}
	removed := false
	for i, s := range e.stepOf {
		s.computed += s.planned
		e.kv += s.planned
		sample := e.steps[i].Sample
		s.planned = 0
		if err != nil {
			s.finish = "failed"
			removed = true
			continue
		}
		if !sample || s.idle {
			continue
		}
		info.Generated++
		var first *Timing
		if s.generated == 0 {
			first = &Timing{Queue: s.admitted.Sub(s.arrived), Batch: len(e.steps), FirstToken: now.Sub(s.arrived)}
		}
		e.accept(s, next[i], first)
		if s.finish != "" {
			info.Finished++
			removed = true
		}
	}
	if !removed {
		return
	}
	if cfg.Policy == Static {
		e.endStaticRows(err, now)
		return
	}
	e.running = slices.DeleteFunc(e.running, func(s *seq) bool {
		if s.finish == "" {
			return false
		}
		e.release(s)
		if e.endRow(s, err) {
			e.observeLife(now.Sub(s.admitted))
		}
		return true
	})
}

// endStaticRows answers the static batch's rows that finished (or all of
// them, after a decoder failure): they stay in the batch, idle, until every
// row has finished; then the batch is freed.
func (e *Engine) endStaticRows(err error, now time.Time) {
	all := true
	for _, s := range e.running {
		if !s.idle && (s.finish != "" || err != nil) {
			s.idle = true
			e.endRow(s, err)
		}
		all = all && s.idle
	}
	if !all {
		return
	}
	if err == nil {
		e.observeLife(now.Sub(e.running[0].admitted))
	}
	for _, s := range e.running {
		e.release(s)
	}
	e.running = e.running[:0]
}

// finishCut marks a sequence cut for a slow reader.
const finishCut FinishReason = "cut"

// endRow answers a sequence that left the step; true when it finished.
func (e *Engine) endRow(s *seq, err error) bool {
	switch {
	case err != nil:
		e.end(s, err)
	case s.finish == finishCut:
		e.end(s, ErrSlowReader)
	default:
		e.end(s, nil)
		return true
	}
	return false
}

// observeLife folds a finished sequence's running time into the estimate.
func (e *Engine) observeLife(d time.Duration) {
	old := e.life.Load()
	if old == 0 {
		e.life.Store(int64(d))
		return
	}
	e.life.Store(old + (int64(d)-old)/8)
}

// accept records a sampled token: the stop rules, the released text and the
// stream.
func (e *Engine) accept(s *seq, tok int32, first *Timing) {
	s.tokens = append(s.tokens, tok)
	s.generated++
	mayStop := s.generated >= s.req.MinTokens
	isEOS := tok == e.info.EOS
	var b []byte
	if !isEOS {
		b = e.tok.TokenBytes(tok)
	}
	txt, hit := s.text.add(b, mayStop)
	switch {
	case hit:
		s.finish = Stop
	case isEOS && mayStop && !s.req.IgnoreEOS:
		s.finish = Stop
	case s.generated >= s.maxTokens || len(s.tokens) >= e.info.Context:
		s.finish = Length
	}
	if s.finish != "" && !hit {
		txt += s.text.flush()
	}
	if !s.out.push(Token{ID: tok, Text: txt, Finish: s.finish}, first) {
		s.finish = finishCut
	}
}
