package batch

import "time"

// dispatch forms batches from admitted items and hands each ready batch to
// the next free worker. It is the only goroutine touching the open slabs.
//
// Open slabs are kept in order of their first item's arrival. Each event (an
// arrival, a timer, a worker turning idle) re-evaluates which slab is ready;
// the oldest ready slab is offered to the workers, and while no worker takes
// it, arrivals keep joining open slabs.
func (b *Batcher[In, Out]) dispatch() {
	var open []*slab[In, Out]
	var spare []*slab[In, Out]
	in := b.in
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var timerAt time.Time

	addItem := func(it item[In, Out]) {
		b.est.arrive(it.c.enq)
		cfg := b.cfg.Load()
		key := bucketOf(cfg.Buckets, it.size)
		for i := len(open) - 1; i >= 0; i-- {
			s := open[i]
			if s.key == key && len(s.items) < cfg.MaxBatch {
				s.add(it)
				return
			}
		}
		var s *slab[In, Out]
		if n := len(spare); n > 0 {
			s, spare = spare[n-1], spare[:n-1]
		} else {
			// Grown as items come, never allocated at MaxBatch up front:
			// a batch is as large as its items, whatever the bound.
			s = &slab[In, Out]{items: make([]item[In, Out], 0, min(cfg.MaxBatch, initialSlab))}
		}
		s.first, s.key, s.max, s.sum, s.hold = it.c.enq, key, 0, 0, time.Time{}
		s.add(it)
		open = append(open, s)
	}
	add := func(a arrival[In, Out]) {
		if a.many == nil {
			addItem(a.one)
			return
		}
		for _, it := range a.many {
			addItem(it)
		}
	}

	for {
		// Take what is already queued without blocking, so that a burst is
		// judged as a whole.
	drain:
		for in != nil {
			select {
			case a, ok := <-in:
				if !ok {
					in = nil
					break drain
				}
				add(a)
			default:
				break drain
			}
		}
		if in == nil && len(open) == 0 {
			close(b.ready)
			return
		}

		now := time.Now()
		pick, wake := b.pick(open, now, in == nil)
		var ready chan<- *slab[In, Out]
		var cand *slab[In, Out]
		var n int64
		if pick >= 0 {
			ready, cand, n = b.ready, open[pick], int64(len(open[pick].items))
		}
		var timeout <-chan time.Time
		if pick < 0 && !wake.IsZero() {
			if !wake.Equal(timerAt) {
				timer.Reset(wake.Sub(now))
				timerAt = wake
			}
			timeout = timer.C
		}

		select {
		case ready <- cand:
			// The worker owns cand now: n was counted before the send.
			b.queued.Add(-n)
			b.busy.Add(1) // here, not in the worker, so that the next pick sees it
			open = append(open[:pick], open[pick+1:]...)
		case a, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			add(a)
		case <-timeout:
			timerAt = time.Time{}
		case <-b.idle:
		}
		// Recycle the slabs workers have given back.
		for len(spare) < cap(b.back) {
			select {
			case s := <-b.back:
				spare = append(spare, s)
				continue
			default:
			}
			break
		}
	}
}

func (s *slab[In, Out]) add(it item[In, Out]) {
	s.items = append(s.items, it)
	s.max = max(s.max, it.size)
	s.sum += it.size
}

// pick returns the index of the oldest ready slab, or -1 and when to look
// again (zero: only on the next event).
func (b *Batcher[In, Out]) pick(open []*slab[In, Out], now time.Time, draining bool) (int, time.Time) {
	cfg := b.cfg.Load()
	var wake time.Time
	for i, s := range open {
		n := len(s.items)
		if n >= cfg.MaxBatch || draining {
			return i, time.Time{}
		}
		deadline := s.first.Add(cfg.MaxLatency)
		switch cfg.Policy {
		case Immediate:
			return i, time.Time{}
		case Adaptive:
			ready, again := b.adaptiveReady(cfg, s, now, deadline)
			if ready {
				return i, time.Time{}
			}
			deadline = again // zero: at the next event
		default: // Fixed
			if !now.Before(deadline) {
				return i, time.Time{}
			}
		}
		if !deadline.IsZero() && (wake.IsZero() || deadline.Before(wake)) {
			wake = deadline
		}
	}
	return -1, wake
}

// initialSlab is the capacity a new batch starts with.
const initialSlab = 16

// bucketOf returns the index of the first bound at or above size, or
// len(bounds) when size exceeds them all. Without bounds every item is in
// bucket 0.
func bucketOf(bounds []int, size int) int {
	for i, ub := range bounds {
		if size <= ub {
			return i
		}
	}
	return len(bounds)
}

// notify wakes the dispatcher to re-evaluate (a worker turned idle, or the
// configuration changed).
func (b *Batcher[In, Out]) notify() {
	select {
	case b.idle <- struct{}{}:
	default:
	}
}
