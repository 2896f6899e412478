package route

import "github.com/inferhq/infer/internal/setting"

// prefixPicker is affinity by prompt prefix (SGLang's cache-aware policy,
// on an LRU of block hashes per replica): the replica that recently served
// the longest run of the prompt's leading blocks takes it, when that run is
// at least Threshold of the prompt's blocks; otherwise, or when the loads
// are out of balance, the least loaded replica does. Either way the
// prompt's blocks are then recorded for the replica picked.
//
// Loads are out of balance when the most and least loaded candidates differ
// by more than BalanceAbs in-flight requests and the most loaded carries
// more than BalanceRel × the least (SGLang's rule).
type prefixPicker struct {
	cfg   PrefixConfig
	index *prefixIndex
	rnd   rng
}

// PrefixConfig configures the prefix index (the prefix and scored
// policies) and the prefix policy's rule. Zero values take the defaults.
type PrefixConfig struct {
	// BlockBytes is the size of a prompt block, in bytes. Default 64
	// (about 16 tokens of English, an engine's KV block).
	BlockBytes int
	// MaxBlocks bounds the blocks of a prompt that are hashed and matched:
	// a prompt's bytes beyond MaxBlocks × BlockBytes are not looked at.
	// Default 512 (32 KiB).
	MaxBlocks int
	// Capacity is how many blocks the index remembers per replica, the
	// least recently used forgotten first: about 50 bytes of memory each.
	// Size it to what a replica's cache holds (KV tokens × about 4 bytes
	// ÷ BlockBytes). Default 32768 (2 MiB of prompts).
	Capacity int
	// Threshold is the least fraction of a prompt's blocks a replica must
	// hold to be preferred. Default 0.5 (SGLang's cache_threshold).
	Threshold float64
	// BalanceAbs and BalanceRel decide when loads are out of balance.
	// Defaults 64 and 1.5 (SGLang's balance_abs_threshold and
	// balance_rel_threshold).
	BalanceAbs int
	BalanceRel float64
}

// Bounds of PrefixConfig.
const (
	MaxBlockBytes    = 64 << 10
	MaxPromptBlocks  = 1 << 14
	MaxIndexCapacity = 1 << 21
)

func (c PrefixConfig) withDefaults() PrefixConfig {
	if c.BlockBytes <= 0 {
		c.BlockBytes = 64
	}
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = 512
	}
	if c.Capacity <= 0 {
		c.Capacity = 32768
	}
	if c.Threshold <= 0 {
		c.Threshold = 0.5
	}
	if c.BalanceAbs <= 0 {
		c.BalanceAbs = 64
	}
	if c.BalanceRel <= 0 {
		c.BalanceRel = 1.5
	}
	return c
}

func (c PrefixConfig) validate() error {
	switch {
	case c.BlockBytes < 0 || c.BlockBytes > MaxBlockBytes:
		return setting.Errorf(SettingPrefixBlock, c.BlockBytes, "want 1 to %d bytes", MaxBlockBytes)
	case c.MaxBlocks < 0 || c.MaxBlocks > MaxPromptBlocks:
		return setting.Errorf(SettingPrefixMaxBlocks, c.MaxBlocks, "want 1 to %d", MaxPromptBlocks)
	case c.Capacity < 0 || c.Capacity > MaxIndexCapacity:
		return setting.Errorf(SettingPrefixCapacity, c.Capacity, "want 1 to %d blocks per replica", MaxIndexCapacity)
	case c.Threshold < 0 || c.Threshold > 1 || c.Threshold != c.Threshold:
		return setting.Errorf(SettingPrefixThreshold, c.Threshold, "want a fraction of the prompt's blocks, above 0, at most 1")
	case c.BalanceAbs < 0:
		return setting.Errorf(SettingBalanceAbs, c.BalanceAbs, "want at least 1 request")
	case c.BalanceRel != 0 && !(c.BalanceRel >= 1):
		return setting.Errorf(SettingBalanceRel, c.BalanceRel, "want at least 1")
	}
	return nil
}

func (p *prefixPicker) Pick(req *Request, cands []*Replica) (*Replica, Reason) {
	blocks := p.index.blocks(req)
	pick, reason := p.choose(blocks, cands)
	p.index.record(blocks, pick)
	return pick, reason
}

func (p *prefixPicker) choose(blocks []uint64, cands []*Replica) (*Replica, Reason) {
	if len(blocks) == 0 || p.imbalanced(cands) {
		return leastLoaded(cands, p.rnd), ReasonFallback
	}
	var buf [16]int
	matched := buf[:0]
	if len(cands) > len(buf) {
		matched = make([]int, len(cands))
	}
	matched = matched[:len(cands)]
	p.index.match(blocks, cands, matched)
	best := -1
	for i, m := range matched {
		if m > 0 && (best < 0 || m > matched[best] || m == matched[best] && loadLess(cands[i], cands[best])) {
			best = i
		}
	}
	if best >= 0 && float64(matched[best]) >= p.cfg.Threshold*float64(len(blocks)) {
		return cands[best], ReasonAffinity
	}
	return leastLoaded(cands, p.rnd), ReasonFallback
}

// imbalanced applies SGLang's rule to the candidates' in-flight requests.
func (p *prefixPicker) imbalanced(cands []*Replica) bool {
	lo, hi := cands[0].InFlight(), cands[0].InFlight()
	for _, c := range cands[1:] {
		lo, hi = min(lo, c.InFlight()), max(hi, c.InFlight())
	}
	return hi-lo > p.cfg.BalanceAbs && float64(hi) > p.cfg.BalanceRel*float64(lo)
}

func (p *prefixPicker) SetReplicas(all []*Replica) { p.index.SetReplicas(all) }
