package generate

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/inferhq/infer/models"
)

// step plans and runs one step. It returns ran false when there was nothing
// to run, with the time to look again if a static batch is forming.
func (e *Engine) step(ctx context.Context, cfg *Config, draining bool) (time.Time, bool) {
	var info StepInfo
	e.relayout(cfg, &info)
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
		st := models.StepSeq{ID: s.id, Past: s.computed, PromptLen: s.promptLen, Sampling: s.req.Sampling,
			BlockSize: e.pool.size, Blocks: s.blocks}
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
	info.Running, info.Waiting = len(e.running), len(e.waiting)
	info.KVUsed, info.KVCached, info.KVTokens = e.pool.used()*e.pool.size, e.pool.idle*e.pool.size, e.pool.total()*e.pool.size
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

// relayout applies a change that Reconfigure made to the KV's layout: a
// new block size preempts every running sequence (a static batch's finished
// rows are dropped) and starts an empty pool; the prefix cache turned off
// forgets what it holds.
func (e *Engine) relayout(cfg *Config, info *StepInfo) {
	if cfg.BlockSize != e.pool.size {
		for len(e.running) > 0 {
			if s := e.running[len(e.running)-1]; s.idle {
				e.running = e.running[:len(e.running)-1]
				e.release(s)
				continue
			}
			e.preemptLast()
			info.Preempted++
		}
		e.pool = newBlockPool(cfg.BlockSize, cfg.KVTokens, e.seed)
	}
	if cfg.NoPrefixCache && len(e.pool.index) > 0 {
		e.pool.clear()
		for _, s := range e.running {
			s.cachedBlocks = 0
		}
	}
}

// planner tracks the budget of the step being planned.
type planner struct {
	e       *Engine
	budget  int
	preempt int
}

// reserve gives s the blocks for n more tokens, preempting the most
// recently admitted running sequences as needed. It returns false when s
// itself was preempted.
func (p *planner) reserve(s *seq, n int) bool {
	pool := p.e.pool
	need := pool.blocksFor(s.computed+s.planned+n) - len(s.blocks)
	for pool.free() < need {
		v := p.e.running[len(p.e.running)-1]
		p.budget += v.planned
		p.e.preemptLast()
		p.preempt++
		if v == s {
			return false
		}
	}
	pool.grow(s, need)
	return true
}

// planContinuous schedules running decodes first, then the running
// sequences' prompt chunks, then (unless it preempted) admits waiting
// requests in arrival order while the budget, MaxSeqs and the KV allow.
func (e *Engine) planContinuous(cfg *Config, info *StepInfo) {
	p := &planner{e: e, budget: cfg.MaxBatchedTokens}
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
			p.budget -= n
		}
	}
	if cfg.SeparatePrefill {
		prefills()
		e.admit(cfg, p, info)
		if p.preempt == 0 && !e.anyPlanned() {
			decodes()
		}
	} else {
		decodes()
		prefills()
		if p.preempt == 0 {
			e.admit(cfg, p, info)
		}
	}
	info.Preempted += p.preempt
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
// the head is admitted when a slot and budget are free and the blocks of its
// whole prompt (with the tokens it had generated, after a preemption) and
// one more token, plus the blocks each running sequence needs to grow by one
// token, fit in the free blocks. A cached prefix costs only the blocks that
// nobody else holds (they leave the free list); its tokens are not
// computed, so they take no budget. The head is never skipped, so a long
// prompt is not starved by shorter ones behind it.
func (e *Engine) admit(cfg *Config, p *planner, info *StepInfo) {
	headroom := -1
	for len(e.waiting) > 0 && len(e.running) < cfg.maxSeqs() && p.budget > 0 {
		w := e.waiting[0]
		if headroom < 0 {
			headroom = 0
			for _, s := range e.running {
				headroom += e.pool.blocksFor(s.computed+s.planned+1) - len(s.blocks)
			}
		}
		hits, idle := e.cachedPrefix(cfg, w)
		if e.pool.blocksFor(len(w.tokens)+1)-len(hits)+idle+headroom > e.pool.free() {
			return
		}
		e.start(cfg, w, hits, info)
		n := min(len(w.tokens)-w.computed, p.budget)
		w.planned = n
		e.pool.grow(w, e.pool.blocksFor(w.computed+n)-len(w.blocks))
		p.budget -= n
		headroom += e.pool.blocksFor(w.computed+n+1) - len(w.blocks)
	}
}

// cachedPrefix returns the cached blocks w would start after, and how many
// of them nobody holds; none while the prefix cache is off.
func (e *Engine) cachedPrefix(cfg *Config, w *seq) ([]int32, int) {
	if cfg.NoPrefixCache {
		return nil, 0
	}
	var idle int
	e.hits, idle = e.pool.match(w, e.hits[:0])
	return e.hits, idle
}

// start moves the head of the waiting queue to the running set, holding the
// cached blocks hits of its prefix: its computation starts after them. A
// request's first start counts toward the prefix cache's statistics.
func (e *Engine) start(cfg *Config, w *seq, hits []int32, info *StepInfo) {
	e.waiting = e.waiting[1:]
	e.queued.Add(-1)
	e.nextID++
	w.id = e.nextID
	for _, b := range hits {
		e.pool.ref(b)
	}
	w.blocks = append(w.blocks[:0], hits...)
	w.cachedBlocks = len(hits)
	w.computed = len(hits) * e.pool.size
	if w.admitted.IsZero() {
		w.admitted = time.Now()
		w.cached = w.computed
		if !cfg.NoPrefixCache {
			info.PrefixQueries += len(w.tokens)
			info.PrefixHits += w.computed
		}
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
		// longest answer is done. Σ ceil((prompt + longest) / size)
		// blocks are at most (prompts + rows·(longest + size - 1)) / size;
		// a cached prefix is not counted off.
		prompts, longest, room := 0, 0, e.pool.free()*e.pool.size
		for len(e.waiting) > 0 && len(e.running) < slots {
			w := e.waiting[0]
			l := max(longest, w.maxTokens-w.generated)
			if len(e.running) > 0 && prompts+len(w.tokens)+(len(e.running)+1)*(l+e.pool.size-1) > room {
				break
			}
			prompts += len(w.tokens)
			longest = l
			hits, _ := e.cachedPrefix(cfg, w)
			e.start(cfg, w, hits, info)
			w.planned = len(w.tokens) - w.computed
			e.pool.grow(w, e.pool.blocksFor(len(w.tokens))-len(w.blocks))
		}
		return time.Time{}
	}
	// The batch runs: every row steps, the finished ones on padding.
	p := &planner{e: e, budget: math.MaxInt}
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
	}
	info.Preempted += p.preempt
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
		sample := e.steps[i].Sample
		s.planned = 0
		if err != nil {
			s.finish = "failed"
			removed = true
			continue
		}
		if s.idle {
			continue
		}
		if !cfg.NoPrefixCache {
			e.pool.cacheFull(s, s.computed)
		}
		if !sample {
			continue
		}
		info.Generated++
		var first *Timing
		if s.generated == 0 {
			first = &Timing{Queue: s.admitted.Sub(s.arrived), Batch: len(e.steps), FirstToken: now.Sub(s.arrived), CachedTokens: s.cached}
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
	prev := s.tokens[len(s.tokens)-1]
	s.tokens = append(s.tokens, tok)
	s.generated++
	mayStop := s.generated >= s.req.MinTokens
	isEOS := tok == e.info.EOS
	var b []byte
	switch {
	case isEOS:
	case e.ctok != nil:
		b = e.ctok.TokenBytesAfter(prev, tok)
	default:
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
