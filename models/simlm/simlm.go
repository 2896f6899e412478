// Package simlm is a simulated generative model (--model sim-lm): an engine
// step with n decoding sequences and p prompt tokens being prefilled takes
// Step + n·PerSeq + p·PerPrefillToken of wall time without using the CPU, the
// way a host thread waits on a GPU. Its tokens are deterministic: the token at
// a position depends only on the prompt, the position and (when sampling) the
// seed, and each prompt ends with EOS after a natural length drawn from a
// lognormal distribution seeded by the prompt, so that mixed output lengths
// happen without ignore_eos. Each instance has a simulated KV capacity and
// fails a step that would exceed it, as a real device runs out of memory.
//
// Its KV follows the engine's blocks (models.DecoderInfo.BlockKV): the
// simulated key and value of a position is a hash of the tokens up to it,
// stored in the slot of the block the sequence's table names, and a
// sequence that starts after a cached prefix reads its prompt from there. So
// a cached prompt token costs no prefill time, and a hit's answer equals a
// miss's only if the engine handed over the right blocks. Like a device
// checking its own invariants, it fails a step that writes a block another
// sequence holds, or starts after a block that was never filled.
//
// It exists to study generative serving (continuous vs static batching)
// where no accelerator is present, and to make the engine's tests exact.
package simlm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/sim"
)

// Config is the simulated cost and shape of the model. The zero value
// computes instantly, with the documented defaults for the rest.
type Config struct {
	// Step is the fixed cost of any step (the weights' pass through
	// memory, kernel launches).
	Step time.Duration
	// PerSeq is the added cost of each sequence decoding one token.
	PerSeq time.Duration
	// PerPrefillToken is the added cost of each prompt token prefilled
	// (or recomputed after a preemption).
	PerPrefillToken time.Duration
	// Context is the most tokens one sequence may hold. Default
	// DefaultContext.
	Context int
	// KVTokens is the simulated KV capacity of one instance, in tokens
	// summed over its sequences. Default DefaultKVTokens.
	KVTokens int
	// MedianLen and Sigma shape the lognormal natural length of an answer
	// (tokens up to and including EOS); MaxLen caps it. Defaults 100, 0.8
	// and 1024.
	MedianLen float64
	Sigma     float64
	MaxLen    int
	// Wait, if set, replaces the precise waiter (e.g. time.Sleep, whose
	// virtual time testing/synctest controls). Each instance calls it from
	// one goroutine at a time.
	Wait func(time.Duration)
}

// Defaults of Config's shape.
const (
	// DefaultContext is Config.Context's default, in tokens.
	DefaultContext = 4096
	// DefaultKVTokens is Config.KVTokens' default: 16 sequences of the full
	// context, or 32 of 2048.
	DefaultKVTokens = 65536
)

// The cost of a step that infer serve --model sim-lm simulates unless told
// otherwise: an accelerator's, about 1,850 tokens/s at 32 sequences of 138
// tokens out and 272 in. (A zero Config computes instantly.)
const (
	DefaultStep            = 8 * time.Millisecond
	DefaultPerSeq          = 250 * time.Microsecond
	DefaultPerPrefillToken = 20 * time.Microsecond
)

func (c Config) withDefaults() Config {
	if c.Context <= 0 {
		c.Context = DefaultContext
	}
	if c.KVTokens <= 0 {
		c.KVTokens = DefaultKVTokens
	}
	if c.MedianLen <= 0 {
		c.MedianLen = 100
	}
	if c.Sigma <= 0 {
		c.Sigma = 0.8
	}
	if c.MaxLen <= 0 {
		c.MaxLen = 1024
	}
	return c
}

// Name is the simulated decoder's name, as clients and the command line
// address it.
const Name = "sim-lm"

// The names of Config's settings in errors (*setting.Error).
const (
	SettingStep            setting.Name = "step cost"              // Config.Step
	SettingPerSeq          setting.Name = "per-sequence cost"      // Config.PerSeq
	SettingPerPrefillToken setting.Name = "per-prefill-token cost" // Config.PerPrefillToken
	SettingKVTokens        setting.Name = "KV tokens"              // Config.KVTokens
)

// Validate reports a Config New refuses: a negative cost, or a KV capacity
// below the context (one long sequence could never run).
func (c Config) Validate() error {
	switch d := c.withDefaults(); {
	case c.Step < 0:
		return setting.Errorf(SettingStep, c.Step, "must not be negative")
	case c.PerSeq < 0:
		return setting.Errorf(SettingPerSeq, c.PerSeq, "must not be negative")
	case c.PerPrefillToken < 0:
		return setting.Errorf(SettingPerPrefillToken, c.PerPrefillToken, "must not be negative")
	case d.KVTokens < d.Context:
		return setting.Errorf(SettingKVTokens, d.KVTokens, "want at least the context (%d tokens): one long sequence could never run", d.Context)
	}
	return nil
}

// Cost returns the simulated wall time of a step with decodes decoding
// sequences and prefill prompt tokens.
func (c Config) Cost(decodes, prefill int) time.Duration {
	return c.Step + time.Duration(decodes)*c.PerSeq + time.Duration(prefill)*c.PerPrefillToken
}

var (
	// ErrKVFull is the error of a step that would hold more tokens than
	// Config.KVTokens: the engine's accounting failed.
	ErrKVFull = errors.New("simlm: KV cache full")
	// ErrBadStep is the error of a step whose Past does not match the
	// tokens the instance holds for the sequence, or that runs past the
	// context.
	ErrBadStep = errors.New("simlm: inconsistent step")
)

// Factory creates simulated decoder instances.
type Factory struct{ cfg Config }

var _ models.DecoderFactory = (*Factory)(nil)

// New returns a factory for the simulated decoder.
func New(cfg Config) (*Factory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim-lm: %w", err)
	}
	return &Factory{cfg: cfg.withDefaults()}, nil
}

// Info describes the simulated decoder.
func (f *Factory) Info() models.Info {
	return models.Info{
		Name:    Name,
		Task:    "generate",
		Backend: "sim",
		Params: fmt.Sprintf("step=%v per_seq=%v per_prefill_token=%v kv_tokens=%d context=%d",
			f.cfg.Step, f.cfg.PerSeq, f.cfg.PerPrefillToken, f.cfg.KVTokens, f.cfg.Context),
	}
}

// Decoder describes the model to the engine: GPT-2's vocabulary and EOS. Its
// engine defaults are the engine's own, sized for an accelerator, which
// sim-lm simulates.
func (f *Factory) Decoder() models.DecoderInfo {
	return models.DecoderInfo{Context: f.cfg.Context, EOS: bpe.EOS, Vocab: bpe.Vocab, KVTokens: f.cfg.KVTokens, BlockKV: true}
}

// Tokenizer is GPT-2's byte-level BPE.
func (f *Factory) Tokenizer() models.Tokenizer { return bpe.GPT2() }

// New returns an instance with its own KV accounting and clock.
func (f *Factory) New(context.Context, int) (models.Decoder, error) {
	d := &Decoder{cfg: f.cfg, seqs: make(map[models.SeqID]*seqState)}
	d.wait = f.cfg.Wait
	if d.wait == nil {
		var w sim.Waiter
		d.wait = w.Wait
	}
	return d, nil
}

// Close does nothing.
func (f *Factory) Close() error { return nil }

// Decoder is one simulated instance. It is not safe for concurrent use.
type Decoder struct {
	cfg  Config
	wait func(time.Duration)
	seqs map[models.SeqID]*seqState
	used int // tokens held by the sequences without a block table

	// The KV pool, for sequences with block tables (see models.StepSeq).
	size   int      // tokens per block; 0 until a step brings tables
	kv     []uint64 // by token slot: the hash of the tokens up to its position
	filled []int32  // by block: positions written
	refs   []int32  // by block: sequences held whose table holds it
	inUse  int      // blocks with refs > 0
}

// seqState is what the instance holds for one sequence.
type seqState struct {
	held   int
	run    uint64  // hash of the tokens at positions < held
	prompt uint64  // the prompt's hash (run after the prompt), once held ≥ its length
	length int     // natural answer length; 0 until computed
	table  []int32 // its blocks, with a block table
}

// Step checks the step against the instance's KV, waits its cost, and
// writes each sampled sequence's next token.
func (d *Decoder) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	decodes, prefill, grow := 0, 0, 0
	size := 0 // the step's block size
	if len(seqs) > 0 {
		size = seqs[0].BlockSize
	}
	blocks := size > 0
	for i := range seqs {
		s := &seqs[i]
		if err := d.check(s, size); err != nil {
			return err
		}
		if len(s.Tokens) == 1 && s.Past >= s.PromptLen {
			decodes++
		} else {
			prefill += len(s.Tokens)
		}
		grow += len(s.Tokens)
	}
	if !blocks && d.used+grow > d.cfg.KVTokens-d.inUse*d.size {
		return fmt.Errorf("%w: %d tokens held, the step adds %d, capacity %d", ErrKVFull, d.used+d.inUse*d.size, grow, d.cfg.KVTokens)
	}
	d.wait(d.cfg.Cost(decodes, prefill))
	for i := range seqs {
		s := &seqs[i]
		st := d.seqs[s.ID]
		if st == nil || (s.Past == 0 && !blocks) {
			if st != nil {
				d.used -= st.held
			}
			st = &seqState{run: fnvOffset}
			d.seqs[s.ID] = st
			if blocks {
				d.resume(st, s)
			}
		}
		if blocks {
			if err := d.store(st, s); err != nil {
				return err
			}
		} else {
			for j, tok := range s.Tokens {
				st.feed(s.Past+j, tok, s.PromptLen)
			}
			d.used += len(s.Tokens)
		}
		if !s.Sample {
			continue
		}
		pos := s.Past + len(s.Tokens) // position of the token to draw
		next[i] = d.token(st, s.PromptLen, pos, s.Sampling)
	}
	return nil
}

// feed folds the token at position pos into the sequence's hash.
func (st *seqState) feed(pos int, tok int32, promptLen int) {
	st.run = mix(st.run, uint64(uint32(tok)))
	st.held = pos + 1
	if pos == promptLen-1 {
		st.prompt = st.run
	}
}

// check validates one sequence of a step, changing nothing.
func (d *Decoder) check(s *models.StepSeq, size int) error {
	st := d.seqs[s.ID]
	held := 0
	if st != nil {
		held = st.held
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: sequence %d: %s", ErrBadStep, s.ID, fmt.Sprintf(format, a...))
	}
	if len(s.Tokens) == 0 || s.Past+len(s.Tokens) > d.cfg.Context {
		return bad("past %d and %d tokens (context %d)", s.Past, len(s.Tokens), d.cfg.Context)
	}
	if s.BlockSize != size {
		return bad("block size %d in a step whose first sequence has %d", s.BlockSize, size)
	}
	if size == 0 {
		if s.Past != held {
			return bad("%d tokens held, step gives past %d", held, s.Past)
		}
		return nil
	}
	B := s.BlockSize
	if B != d.size && d.inUse > 0 {
		return bad("block size %d while sequences hold blocks of %d", B, d.size)
	}
	if want := (s.Past + len(s.Tokens) + B - 1) / B; len(s.Blocks) != want {
		return bad("%d blocks for %d positions of %d tokens a block", len(s.Blocks), s.Past+len(s.Tokens), B)
	}
	pool := d.cfg.KVTokens / B
	for _, b := range s.Blocks {
		if b < 0 || int(b) >= pool {
			return fmt.Errorf("%w: sequence %d: block %d outside the pool of %d blocks", ErrKVFull, s.ID, b, pool)
		}
	}
	if st != nil {
		if s.Past != held || !slices.Equal(s.Blocks[:len(st.table)], st.table) {
			return bad("%d tokens held in blocks %v, step gives past %d in blocks %v", held, st.table, s.Past, s.Blocks)
		}
		return nil
	}
	if s.Past%B != 0 {
		return bad("starts at past %d, not after whole blocks of %d", s.Past, B)
	}
	if s.Past > 0 && B != d.size {
		return bad("starts after %d cached tokens in blocks of %d, but the instance holds blocks of %d", s.Past, B, d.size)
	}
	for _, b := range s.Blocks[:s.Past/B] {
		if d.filled[b] != int32(B) {
			return bad("starts after block %d, which holds %d of %d positions", b, d.filled[b], B)
		}
	}
	return nil
}

// resume starts a sequence with a block table after its cached prefix: its
// hashes are read from the slots of the prefix's last position and of its
// prompt's last.
func (d *Decoder) resume(st *seqState, s *models.StepSeq) {
	B := s.BlockSize
	if B != d.size { // checked: no sequence holds a block
		n := d.cfg.KVTokens / B
		d.size, d.kv, d.filled, d.refs = B, make([]uint64, n*B), make([]int32, n), make([]int32, n)
	}
	slot := func(pos int) int { return int(s.Blocks[pos/B])*B + pos%B }
	if s.Past > 0 {
		st.held = s.Past
		st.run = d.kv[slot(s.Past-1)]
		if s.PromptLen <= s.Past {
			st.prompt = d.kv[slot(s.PromptLen-1)]
		}
	}
}

// store writes a sequence's tokens into its blocks.
func (d *Decoder) store(st *seqState, s *models.StepSeq) error {
	B := s.BlockSize
	for _, b := range s.Blocks[len(st.table):] {
		st.table = append(st.table, b)
		if d.refs[b]++; d.refs[b] == 1 {
			d.inUse++
		}
	}
	for j, tok := range s.Tokens {
		pos := s.Past + j
		b, off := s.Blocks[pos/B], pos%B
		if d.refs[b] != 1 {
			return fmt.Errorf("%w: sequence %d writes position %d into block %d, which %d sequences hold", ErrBadStep, s.ID, pos, b, d.refs[b])
		}
		if off == 0 {
			d.filled[b] = 0
		}
		if int(d.filled[b]) != off {
			return fmt.Errorf("%w: sequence %d writes position %d at offset %d of block %d, which holds %d", ErrBadStep, s.ID, pos, off, b, d.filled[b])
		}
		st.feed(pos, tok, s.PromptLen)
		d.kv[int(b)*B+off] = st.run
		d.filled[b]++
	}
	return nil
}

// token is the deterministic token at position pos of a sequence whose
// prompt has promptLen tokens.
func (d *Decoder) token(st *seqState, promptLen, pos int, sp models.Sampling) int32 {
	key := st.prompt
	if sp.Temperature > 0 {
		key = mix(key, sp.Seed^0x9e3779b97f4a7c15)
	}
	if st.length == 0 {
		st.length = d.naturalLength(key)
	}
	if pos-promptLen == st.length-1 {
		return bpe.EOS
	}
	// Any token but EOS, uniformly.
	return int32(mix(key, uint64(pos)) % uint64(bpe.EOS))
}

// naturalLength draws the answer length (EOS included) from the lognormal
// distribution, seeded by key.
func (d *Decoder) naturalLength(key uint64) int {
	u1 := unit(mix(key, 1))
	u2 := unit(mix(key, 2))
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2) // Box–Muller
	n := int(math.Round(d.cfg.MedianLen * math.Exp(d.cfg.Sigma*z)))
	return min(max(n, 1), d.cfg.MaxLen)
}

// NaturalLength returns the natural answer length (EOS included) the model
// gives prompt when decoding greedily: what a client predicting the sim's
// output lengths needs.
func (f *Factory) NaturalLength(prompt []int32) int {
	h := uint64(fnvOffset)
	for _, tok := range prompt {
		h = mix(h, uint64(uint32(tok)))
	}
	return (&Decoder{cfg: f.cfg}).naturalLength(h)
}

// Free drops a sequence's KV; its blocks keep their contents.
func (d *Decoder) Free(id models.SeqID) {
	st, ok := d.seqs[id]
	if !ok {
		return
	}
	if st.table == nil {
		d.used -= st.held
	}
	for _, b := range st.table {
		if d.refs[b]--; d.refs[b] == 0 {
			d.inUse--
		}
	}
	delete(d.seqs, id)
}

// Held returns the tokens the instance holds, summed over its sequences.
func (d *Decoder) Held() int {
	n := 0
	for _, st := range d.seqs {
		n += st.held
	}
	return n
}

// HeldBlocks returns the blocks in the tables of the sequences the instance
// holds: the engine's blocks in use.
func (d *Decoder) HeldBlocks() int { return d.inUse }

// Close drops every sequence and block.
func (d *Decoder) Close() error {
	clear(d.seqs)
	d.used, d.size, d.kv, d.filled, d.refs, d.inUse = 0, 0, nil, nil, nil, 0
	return nil
}

const fnvOffset = 14695981039346656037

// mix is a 64-bit hash step (splitmix64 over h xor v).
func mix(h, v uint64) uint64 {
	x := h ^ (v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unit maps h to (0, 1).
func unit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }
