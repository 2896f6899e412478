package onnx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
)

// maxRunLogits bounds the logits of one run, in floats (32 MiB): a graph
// without logits_to_keep (an export) computes logits at every position it
// feeds, so long prefills are split into runs of at most maxRunLogits/vocab
// tokens (166 for GPT-2). A 512-token prompt of gpt2-mini prefills about as
// fast (within 5 %) in runs of 166 tokens as in runs of 652, and the buffer
// (with ONNX Runtime's own copy of the logits) is a quarter. Runs of graphs
// with logits_to_keep keep the same bound on their tokens, which also bounds
// their activations.
const maxRunLogits = 8 << 20

// Decoder is one instance of a decoder model: its worker's session and the
// KV cache of its sequences (see kvcache.go). It is a models.Decoder and, as
// such, not safe for concurrent use.
//
// A Step runs the sequences that feed one token (decoding) together in one
// run, and those that feed several (prefill chunks) in runs of their own, so
// that a decode row is never padded to a prompt's length. Every run pads its
// rows' past to the longest one, on the left (an in-place graph's: on the
// right, see kvcache.go), and feeds per-row position ids and an attention
// mask over past and current positions. A graph with logits_to_keep
// (models/gpt2's) computes logits at each row's last position only, a
// prefill's one sample; an export without it computes them at every
// position fed.
// Sequences that hold a cache but are not part of a step keep their row in
// the decode run, fed nothing, so that the batch's buffer carries on
// unchanged: a standard graph's row gets a masked position (a hole) instead
// of a token, and holes are packed away whenever the rows are assembled
// anew; an in-place graph's row is left as it is.
type Decoder struct {
	f    *DecoderFactory
	s    *session                    // shared with the worker's other instances
	sess *ort.DynamicAdvancedSession // s.sess; nil once closed
	sig  decoderSig
	info models.DecoderInfo
	dims dims

	seqs map[models.SeqID]*seqState
	used int // tokens in the cache, summed over seqs
	// own is the tokens of the sequences without a block table, which the
	// decoder bounds by KVTokens itself; the engine bounds the others by
	// their blocks, which prefixes share.
	own   int
	pool  *bufPool
	store *blockStore // the blocks of the engine's tables (kvstore.go)

	// Reused from step to step.
	ids, pos []int64
	// An in-place graph's run: its mask (past and fed positions) and its
	// outputs new.{i}.key|value, the cache tensors of a
	// buffer of rows × sequence positions (dims.tensorIn).
	mask  []int64
	fresh []byte
	// A GQA graph's seqlens_k.
	seqLens []int32
	// The logits of the decode run, and of the other runs one after the
	// other (their sampled rows are copied to kept).
	decodeLogits, runLogits []float32
	rowLogits               [][]float32 // by index of the last Step's seqs
	kept                    [][]float32 // by index of the step's seqs
	samplers                []*sampler
	inStep                  map[*seqState]bool
	byRow                   []job // a reused buffer's jobs, by row (see past)
	// keepLogits is what a graph with logits_to_keep is fed: 1, the
	// position sampled from; tests set 0 (every position).
	keepLogits int
}

var _ models.Decoder = (*Decoder)(nil)

func newDecoder(f *DecoderFactory, s *session) *Decoder {
	d := &Decoder{
		f: f, s: s, sess: s.sess, sig: f.sig, info: f.info,
		dims: dims{layers: f.sig.layers, heads: f.sig.heads, headDim: f.sig.headDim, left: f.sig.inPlace || f.sig.gqa, elem: f.sig.kvElem},
		seqs: map[models.SeqID]*seqState{},
		// Free buffers kept for reuse: up to an eighth of the KV bound
		// besides the largest (see bufPool.put).
		pool:   &bufPool{spare: int(f.KVBytes() / 8)},
		inStep: map[*seqState]bool{},

		keepLogits: 1,
	}
	d.store = &blockStore{d: d.dims, slots: f.info.KVTokens}
	// The cache lives outside the Go heap: an instance dropped without
	// Close still gives it back.
	runtime.AddCleanup(d, func(c caches) { c.close() }, caches{d.pool, d.store})
	return d
}

// caches are the memory outside the Go heap a Decoder holds.
type caches struct {
	pool  *bufPool
	store *blockStore
}

func (c caches) close() {
	c.pool.close()
	c.store.close()
}

// job is one row of a run.
type job struct {
	st     *seqState
	tokens []int32 // fed this run; none for a hole
	out    int     // index in the step's seqs and next; -1 when nothing is sampled
	p      models.Sampling
}

// Used returns the tokens in the instance's KV cache, summed over its
// sequences.
func (d *Decoder) Used() int { return d.used }

// Logits returns the logits next[i] was drawn from in the last Step: the
// scores of the vocabulary after seqs[i]'s last token. It is nil when seqs[i]
// did not ask for a sample, and valid until the next Step.
func (d *Decoder) Logits(i int) []float32 {
	if i < 0 || i >= len(d.rowLogits) {
		return nil
	}
	return d.rowLogits[i]
}

// Step runs one engine step; see models.Decoder. Errors in the step's
// arguments (a wrong Past, a token outside the vocabulary, more than the
// context or the KV bound) are found before anything runs, and then the
// cache is as it was.
func (d *Decoder) Step(ctx context.Context, seqs []models.StepSeq, next []int32) error {
	if d.sess == nil {
		return errors.New("onnx: decoder closed")
	}
	if len(next) != len(seqs) {
		return fmt.Errorf("onnx: step of %d sequences with room for %d tokens", len(seqs), len(next))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.check(seqs); err != nil {
		return err
	}
	d.rowLogits = grow(d.rowLogits, len(seqs))
	clear(d.rowLogits)
	clear(d.inStep)
	var prefill, decode []job
	for i, s := range seqs {
		st := d.seqs[s.ID]
		if st == nil || s.Past == 0 {
			if st != nil {
				d.Free(s.ID) // a restart (a recompute after preemption)
			}
			st = &seqState{id: s.ID}
			d.seqs[s.ID] = st
		}
		if err := d.store.claim(st, s); err != nil {
			return err
		}
		if s.Past > st.n {
			if err := d.resume(st, s.Past); err != nil {
				return err
			}
		}
		d.inStep[st] = true
		j := job{st: st, tokens: s.Tokens, out: -1, p: s.Sampling}
		if s.Sample {
			j.out = i
		}
		if st.n == 0 || len(s.Tokens) > 1 {
			prefill = append(prefill, j)
		} else {
			decode = append(decode, j)
		}
	}
	if err := d.prefill(prefill, next); err != nil {
		return err
	}
	if len(decode) == 0 {
		return nil
	}
	if !d.sig.positions {
		return d.byLength(decode, next)
	}
	// The sequences that sit this step out keep their rows, with a hole, in
	// the order of their ids (so that a step's runs do not depend on the
	// order of a map).
	stepping := len(decode)
	for _, st := range d.seqs {
		if !d.inStep[st] && st.kv != nil {
			decode = append(decode, job{st: st, out: -1})
		}
	}
	slices.SortFunc(decode[stepping:], func(a, b job) int { return cmp.Compare(a.st.id, b.st.id) })
	return d.run(decode, next, true)
}

// resume starts st after a cached prefix of past tokens, whole blocks of
// its table: a buffer of one row gets their keys and values from the block
// store, and the sequence's first run computes only its other tokens.
func (d *Decoder) resume(st *seqState, past int) error {
	b, err := d.pool.get(d.dims, 1, past, true)
	if err != nil {
		return err
	}
	d.store.fill(st, past/d.store.size, b, 0)
	d.pool.moveTo(st, b, 0)
	st.n = past
	d.used += past
	return nil
}

// check validates a step's arguments against the cache and, for sequences
// with block tables, against the block store.
func (d *Decoder) check(seqs []models.StepSeq) error {
	used := d.own
	seen := make(map[models.SeqID]bool, len(seqs))
	for _, s := range seqs {
		if seen[s.ID] {
			return fmt.Errorf("onnx: sequence %d appears twice in one step", s.ID)
		}
		seen[s.ID] = true
		st := d.seqs[s.ID]
		switch {
		case len(s.Tokens) == 0:
			return fmt.Errorf("%w: sequence %d: no tokens to feed", models.ErrInvalidInput, s.ID)
		case s.Past < 0:
			return fmt.Errorf("%w: sequence %d: past %d", models.ErrInvalidInput, s.ID, s.Past)
		case s.Past > 0 && st == nil && s.BlockSize == 0:
			return fmt.Errorf("onnx: sequence %d: past %d, but the instance holds no cache for it", s.ID, s.Past)
		case s.Past > 0 && st != nil && st.n != s.Past:
			return fmt.Errorf("onnx: sequence %d: past %d, but the instance holds %d of its tokens", s.ID, s.Past, st.n)
		case s.Past+len(s.Tokens) > d.info.Context:
			return fmt.Errorf("%w: sequence %d: %d tokens, more than the context of %d", models.ErrInputTooLong,
				s.ID, s.Past+len(s.Tokens), d.info.Context)
		}
		for _, t := range s.Tokens {
			if t < 0 || int(t) >= d.info.Vocab {
				return fmt.Errorf("%w: sequence %d: token %d outside the vocabulary of %d", models.ErrInvalidInput,
					s.ID, t, d.info.Vocab)
			}
		}
		if s.Past == 0 && st != nil && st.table == nil {
			used -= st.n
		}
		if s.BlockSize == 0 {
			used += len(s.Tokens)
		}
	}
	if used > d.info.KVTokens {
		return fmt.Errorf("%w: the step needs %d tokens of cache, the bound (--kv-tokens) is %d", ErrKVFull,
			used, d.info.KVTokens)
	}
	return d.store.checkStep(seqs, d.seqs)
}

// prefill runs the jobs that feed several tokens (or start a sequence):
// longest first, in runs of similar lengths (padding each row to at most
// twice its length) and within maxRunLogits; a job longer than that goes in
// pieces, in successive rounds.
func (d *Decoder) prefill(jobs []job, next []int32) error {
	maxTokens := max(1, maxRunLogits/d.info.Vocab)
	for len(jobs) > 0 {
		// This round's pieces: each job's next maxTokens tokens.
		round := make([]job, len(jobs))
		rest := jobs[:0:0]
		for i, j := range jobs {
			round[i] = j
			if len(j.tokens) > maxTokens {
				round[i].tokens, round[i].out = j.tokens[:maxTokens], -1
				j.tokens = j.tokens[maxTokens:]
				rest = append(rest, j)
			}
		}
		slices.SortStableFunc(round, func(a, b job) int { return cmp.Compare(len(b.tokens), len(a.tokens)) })
		for len(round) > 0 {
			s, n := len(round[0].tokens), 1
			// A GQA graph's runs of several tokens have one row: ONNX
			// Runtime's kernel refuses a past with several new tokens at
			// batch > 1, and a prompt at batch > 1 would need its rows
			// padded on the right, where logits_to_keep needs them to end
			// together. A prefill's own tokens fill its compute.
			for n < len(round) && (n+1)*s <= maxTokens && 2*len(round[n].tokens) >= s && !d.sig.gqa &&
				(d.sig.positions || sameShape(round[0], round[n])) {
				n++
			}
			if err := d.run(round[:n], next, false); err != nil {
				return err
			}
			round = round[n:]
		}
		jobs = rest
	}
	return nil
}

// sameShape reports whether two jobs have the same past and the same number
// of tokens, as rows of a graph without position_ids must.
func sameShape(a, b job) bool { return a.st.n == b.st.n && len(a.tokens) == len(b.tokens) }

// byLength runs decode jobs in groups of equal past lengths, for a graph
// without position_ids: it numbers positions from the batch's past length,
// so rows must not be padded.
func (d *Decoder) byLength(jobs []job, next []int32) error {
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(a.st.n, b.st.n) })
	for len(jobs) > 0 {
		n := 1
		for n < len(jobs) && sameShape(jobs[0], jobs[n]) {
			n++
		}
		if err := d.run(jobs[:n], next, false); err != nil {
			return err
		}
		jobs = jobs[n:]
	}
	return nil
}

// past returns the buffer that is the past of a run of jobs, and the jobs
// in its row order: an existing one (see reusable), with the jobs it lacks
// moved into rows that sequences left and the rows left empty fed as holes,
// jobs with no sequence; otherwise the jobs' caches assembled into a new one.
func (d *Decoder) past(jobs []job, decode bool) (*kvBuf, []job, error) {
	if !slices.ContainsFunc(jobs, func(j job) bool { return j.st.kv != nil }) {
		// New sequences only: an empty past.
		return &kvBuf{rows: len(jobs)}, jobs, nil
	}
	longest := 0
	for _, j := range jobs {
		longest = max(longest, j.st.n)
	}
	if b, joining := d.reusable(jobs, longest, decode); b != nil {
		for _, j := range joining {
			d.pool.joinInPlace(d.dims, b, slices.Index(b.seqs, nil), j.st)
		}
		d.byRow = grow(d.byRow, b.rows)
		for r := range d.byRow {
			d.byRow[r] = job{out: -1}
		}
		for _, j := range jobs {
			d.byRow[j.st.row] = j
		}
		return b, d.byRow, nil
	}
	states := make([]*seqState, len(jobs))
	for i, j := range jobs {
		states[i] = j.st
	}
	b, err := d.pool.assemble(d.dims, states, !decode)
	return b, jobs, err
}

// fits reports whether b, whose longest sequence holds longest tokens, can
// be the past of a decode run (one more position): its positions beyond the
// longest sequence (left by sequences that left, or made by holes) are at
// most a quarter of them or 16, and past and present stay within the
// context, which an export's causal mask may be sized to. An in-place
// graph's buffer may have twice the room a buffer assembled for the longest
// sequence gets (see room): every step reads all its positions, where
// assembling copies them once.
func (d *Decoder) fits(b *kvBuf, longest int) bool {
	if d.dims.left {
		return b.t-longest <= 2*(room(longest)-longest)
	}
	return b.t-longest <= max(16, b.t/4) && b.t < d.info.Context
}

// maxEmptyRows is the share of a decode buffer's rows that may stay empty
// (fed as holes, each costing a row's compute) rather than the batch being
// assembled anew, which copies every row: one in eight.
const maxEmptyRows = 8

// reusable returns the buffer that a run of jobs can have as its past
// without assembling, and the jobs that must first move into it, or nil.
// That is the buffer holding most of the jobs, when it holds no sequence
// outside them and fits (see fits), and either its rows are exactly the
// jobs', or, for the decode run, its empty rows (left by sequences that
// finished) take the jobs it lacks with at most rows/maxEmptyRows rows
// staying empty. In continuous batching a sequence that joins takes the row
// of one that left, so that a join or a leave copies one sequence's cache,
// not the batch's.
func (d *Decoder) reusable(jobs []job, longest int, decode bool) (*kvBuf, []job) {
	count := map[*kvBuf]int{}
	var b *kvBuf
	for _, j := range jobs {
		if kv := j.st.kv; kv != nil {
			count[kv]++
			if b == nil || count[kv] > count[b] {
				b = kv
			}
		}
	}
	if b == nil || count[b] != b.live || !d.fits(b, longest) {
		return nil, nil
	}
	var joining []job
	for _, j := range jobs {
		if j.st.kv != b {
			if !decode || j.st.n > b.t {
				return nil, nil
			}
			joining = append(joining, j)
		}
	}
	allowed := 0
	if decode {
		allowed = b.rows / maxEmptyRows
	}
	if empty := b.rows - b.live - len(joining); empty < 0 || empty > allowed {
		return nil, nil
	}
	return b, joining
}

// run feeds each job's tokens after its cache in one ONNX Runtime run and
// samples for the jobs that ask. The jobs' caches move to the run's present
// buffer (an in-place graph's get the new tokens' keys and values written
// after them) only once the run succeeded, so that a failed run loses
// nothing.
// The decode run (decode true, one per step) has logits of its own; other
// runs share one buffer, and the rows sampled from are copied out of it for
// Logits.
func (d *Decoder) run(jobs []job, next []int32, decode bool) error {
	past, jobs, err := d.past(jobs, decode)
	if err != nil {
		return err
	}
	s := 0
	for _, j := range jobs {
		s = max(s, len(j.tokens))
	}
	// A GQA graph's total_sequence_length: GroupQueryAttention writes each
	// row's s positions after its past (a row fed nothing, a padding
	// position), in the buffer itself, which must hold them.
	total := s
	if d.sig.gqa {
		for _, j := range jobs {
			if j.st != nil {
				total = max(total, j.st.n+s)
			}
		}
		if past, err = d.withRoom(past, jobs, total, decode); err != nil {
			return err
		}
	}
	rows, t := len(jobs), past.t
	// The present's mask; for the standard graph, the present itself.
	var present *kvBuf
	var presentMask []int64
	ok := false
	if d.dims.left {
		d.mask = grow(d.mask, rows*(t+s))
		presentMask = d.mask
		if !d.sig.gqa {
			d.fresh = grow(d.fresh, d.dims.bytes(rows, s))
		}
	} else {
		present, err = d.pool.get(d.dims, rows, t+s, !decode)
		if err != nil {
			return err
		}
		presentMask = present.mask
		defer func() {
			if !ok {
				d.pool.put(present)
			}
		}()
	}

	// Inputs: the tokens, their positions, and the mask of past and current
	// positions, which is also the present's mask. A graph that takes
	// logits_to_keep computes the logits of each row's last position only,
	// so the rows' tokens end together: shorter rows are padded on the
	// left, a hole between past and tokens. Otherwise they are padded on
	// the right, and every position has logits.
	kept := s // positions with logits, a row
	if d.sig.keepLast && d.keepLogits > 0 {
		kept = min(d.keepLogits, s)
	}
	d.ids, d.pos = grow(d.ids, rows*s), grow(d.pos, rows*s)
	for r, j := range jobs {
		ids, pos := d.ids[r*s:(r+1)*s], d.pos[r*s:(r+1)*s]
		copy(presentMask[r*(t+s):], past.mask[r*t:(r+1)*t])
		mask := presentMask[r*(t+s)+t : (r+1)*(t+s)]
		first := d.first(j, s)
		n := 0 // the row's past tokens; none in a row no sequence holds
		if j.st != nil {
			n = j.st.n
		}
		for i := range s {
			if k := i - first; k >= 0 && k < len(j.tokens) {
				ids[i], pos[i], mask[i] = int64(j.tokens[k]), int64(n+k), 1
			} else {
				// Padding: masked, at a position inside the table.
				ids[i], pos[i], mask[i] = 0, int64(min(n+max(k, 0), d.info.Context-1)), 0
			}
		}
	}
	buf := &d.runLogits
	if decode {
		buf = &d.decodeLogits
	}
	*buf = grow(*buf, rows*kept*d.info.Vocab)
	logits := *buf

	var in, out values
	defer func() { destroy(in.vs); destroy(out.vs) }()
	tokShape := ort.NewShape(int64(rows), int64(s))
	addTensor(&in, tokShape, d.ids)
	if d.sig.gqa {
		d.seqLens = grow(d.seqLens, rows)
		for r, j := range jobs {
			n := 0
			if j.st != nil {
				n = j.st.n
			}
			d.seqLens[r] = int32(n + s - 1)
		}
		addTensor(&in, ort.NewShape(int64(rows)), d.seqLens)
		addTensor(&in, ort.NewShape(1), []int32{int32(total)})
	} else {
		addTensor(&in, ort.NewShape(int64(rows), int64(t+s)), presentMask)
	}
	if d.sig.positions {
		addTensor(&in, tokShape, d.pos)
	}
	addTensor(&out, ort.NewShape(int64(rows), int64(kept), int64(d.info.Vocab)), logits)
	cacheAt := len(in.vs)
	for i := range d.dims.tensors() {
		addCacheTensor(&in, d.dims, rows, t, d.dims.tensor(past, i))
		switch {
		case d.sig.gqa: // the present is the past's own tensors, below
		case d.dims.left:
			addCacheTensor(&out, d.dims, rows, s, d.dims.tensorIn(d.fresh, i, rows, s))
		default:
			addCacheTensor(&out, d.dims, rows, t+s, d.dims.tensor(present, i))
		}
	}
	if d.sig.cacheBranch {
		addTensor(&in, ort.NewShape(1), []bool{t > 0})
	}
	if d.sig.keepLast {
		addTensor(&in, ort.NewShape(1), []int64{int64(d.keepLogits)})
	}
	if err := errors.Join(in.err, out.err); err != nil {
		return fmt.Errorf("onnx: tensors: %w", err)
	}
	inputs, outputs := in.vs, out.vs
	if d.sig.gqa {
		// Destroyed once, as inputs.
		outputs = append(slices.Clip(outputs), inputs[cacheAt:cacheAt+d.dims.tensors()]...)
	}
	if err := d.sess.Run(inputs, outputs); err != nil {
		return fmt.Errorf("onnx: run %s: %w", d.f.cfg.Name, err)
	}
	ok = true
	switch {
	case d.sig.gqa:
		for r, j := range jobs {
			if j.st != nil {
				mark(past, r, j.st.n, len(j.tokens))
			}
		}
	case d.dims.left:
		if err := d.keepFresh(past, jobs, s, decode); err != nil {
			return err
		}
	}

	for r, j := range jobs {
		if j.st == nil {
			continue
		}
		from := j.st.n
		j.st.n += len(j.tokens)
		d.used += len(j.tokens)
		if j.st.table == nil {
			d.own += len(j.tokens)
		}
		if !d.dims.left {
			d.pool.moveTo(j.st, present, r)
		}
		d.store.wrote(j.st, from)
	}
	d.sample(jobs, logits, kept, next, !decode)
	return nil
}

// first returns where a job's tokens start among the s positions of its
// run's row: a graph that takes logits_to_keep has each row's tokens end
// together (see run).
func (d *Decoder) first(j job, s int) int {
	if d.sig.keepLast {
		return s - len(j.tokens)
	}
	return 0
}

// keepFresh writes the keys and values an in-place graph's run computed
// (d.fresh) into the cache after each row's past: into past itself when
// every row has room; otherwise into past widened with room for them (see
// withRoom). The jobs' states still count their past tokens only.
func (d *Decoder) keepFresh(past *kvBuf, jobs []job, s int, decode bool) error {
	need := 0
	for _, j := range jobs {
		if j.st != nil {
			need = max(need, j.st.n+len(j.tokens))
		}
	}
	b, err := d.withRoom(past, jobs, need, decode)
	if err != nil {
		return err
	}
	for r, j := range jobs {
		if j.st != nil && len(j.tokens) > 0 {
			writeNew(d.dims, b, r, j.st.n, d.fresh, s, d.first(j, s), len(j.tokens))
		}
	}
	return nil
}

// withRoom returns past, the left-layout buffer of a run of jobs (by row),
// when it has need positions; otherwise past widened in place when its
// memory has room for need (see room; but at least need, which a GQA
// graph's padding may put past the context), or else a buffer assembled
// with that room, whose rows are past's and to which the jobs' states
// move.
func (d *Decoder) withRoom(past *kvBuf, jobs []job, need int, decode bool) (*kvBuf, error) {
	if need <= past.t && past.data != nil {
		return past, nil
	}
	states := make([]*seqState, len(jobs))
	for r, j := range jobs {
		states[r] = j.st
	}
	d.pool.widened++
	t := max(need, min(room(need), d.info.Context))
	if widenInPlace(d.dims, past, states, t) {
		return past, nil
	}
	return d.pool.assembleAt(d.dims, states, t, !decode)
}

// addCacheTensor adds a cache tensor of a buffer of rows × t positions,
// data, as the tensor of its element type.
func addCacheTensor(v *values, d dims, rows, t int, data []byte) {
	shape := ort.NewShape(int64(rows), int64(d.heads), int64(t), int64(d.headDim))
	if d.elem == elemInt8 {
		addTensor(v, shape, view[int8](data))
	} else {
		addTensor(v, shape, view[float32](data))
	}
}

// view returns b as a slice of T, which must be aligned for T.
func view[T float32 | int8](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// values collects the tensors of a run and the first error making them.
type values struct {
	vs  []ort.Value
	err error
}

func addTensor[T ort.TensorData](v *values, shape ort.Shape, data []T) {
	if v.err != nil {
		return
	}
	t, err := ort.NewTensor(shape, data)
	if err != nil {
		v.err = err
		return
	}
	v.vs = append(v.vs, t)
}

// sample draws the next token of each job that asks, from the logits after
// its last token, the jobs split among goroutines when there are several.
// logits has kept positions a row: the last ones of the run, where every
// row's tokens end when the graph has logits_to_keep; otherwise every
// position, the tokens first. With keep, the rows are copied for Logits,
// since logits will be reused.
func (d *Decoder) sample(jobs []job, logits []float32, kept int, next []int32, keep bool) {
	vocab := d.info.Vocab
	var todo []job
	for r, j := range jobs {
		if j.out < 0 {
			continue
		}
		last := len(j.tokens) - 1
		if d.sig.keepLast {
			last = kept - 1
		}
		row := logits[(r*kept+last)*vocab:][:vocab]
		if keep {
			d.kept = grow(d.kept, len(next))
			d.kept[j.out] = append(d.kept[j.out][:0], row...)
			row = d.kept[j.out]
		}
		d.rowLogits[j.out] = row
		todo = append(todo, j)
	}
	workers := min(len(todo), runtime.GOMAXPROCS(0))
	for len(d.samplers) < workers {
		d.samplers = append(d.samplers, &sampler{})
	}
	drawAll := func(w int) {
		sm := d.samplers[w]
		for k := w; k < len(todo); k += workers {
			j := todo[k]
			next[j.out] = sm.draw(d.rowLogits[j.out], j.p, j.st.n)
		}
	}
	if workers <= 1 {
		if workers == 1 {
			drawAll(0)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { drawAll(w) })
	}
	wg.Wait()
}

// Free drops a sequence's cache. Free of an unknown id is a no-op.
func (d *Decoder) Free(id models.SeqID) {
	st := d.seqs[id]
	if st == nil {
		return
	}
	d.pool.leave(st)
	d.used -= st.n
	if st.table == nil {
		d.own -= st.n
	}
	d.store.release(st)
	delete(d.seqs, id)
}

// Close drops every sequence's cache and frees its memory, and releases its
// share of the worker's session. Closing twice is harmless.
func (d *Decoder) Close() error {
	if d.sess == nil {
		return nil
	}
	clear(d.seqs)
	d.used, d.own = 0, 0
	caches{d.pool, d.store}.close()
	d.decodeLogits, d.runLogits, d.rowLogits, d.kept = nil, nil, nil, nil
	d.sess = nil
	d.f.sessions.release(d.s)
	return nil
}
