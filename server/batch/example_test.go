package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/inferhq/infer/server/batch"
)

// A worker Func computes a whole batch at once; the batcher routes each
// output back to the caller that submitted its input.
func Example() {
	upper := func(_ context.Context, in []string, out []string) error {
		for i, s := range in {
			out[i] = strings.ToUpper(s)
		}
		return nil
	}
	b := batch.New(batch.Config{MaxBatch: 32, MaxLatency: 5 * time.Millisecond}, upper)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()

	var wg sync.WaitGroup
	results := make([]string, 3)
	for i, word := range []string{"batch", "me", "up"} {
		wg.Go(func() {
			out, err := b.Submit(context.Background(), word)
			if err != nil {
				results[i] = err.Error()
				return
			}
			results[i] = out
		})
	}
	wg.Wait()
	fmt.Println(results)

	stop() // stop admitting, finish what was admitted
	fmt.Println(<-done)
	// Output:
	// [BATCH ME UP]
	// <nil>
}

// Do submits a multi-item request; per-item failures come back as an
// *ItemsError while the other items succeed.
func ExampleBatcher_Do() {
	parse := func(_ context.Context, in []string, out []int) error {
		errs := make([]error, len(in))
		failed := false
		for i, s := range in {
			if _, err := fmt.Sscan(s, &out[i]); err != nil {
				errs[i], failed = fmt.Errorf("not a number: %q", s), true
			}
		}
		if failed {
			return &batch.ItemsError{Errs: errs}
		}
		return nil
	}
	b := batch.New(batch.Config{MaxBatch: 2, Policy: batch.Immediate}, parse, parse)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go b.Run(ctx)

	outs, stats, err := b.Do(context.Background(), []string{"1", "two", "3"})
	var ie *batch.ItemsError
	if errors.As(err, &ie) {
		for i, e := range ie.Errs {
			if e != nil {
				fmt.Printf("item %d: %v\n", i, e)
				continue
			}
			fmt.Printf("item %d: %d\n", i, outs[i])
		}
	}
	fmt.Println("largest batch <= 2:", stats.BatchSize <= 2)
	// Output:
	// item 0: 1
	// item 1: not a number: "two"
	// item 2: 3
	// largest batch <= 2: true
}

// Admission is bounded: beyond QueueCap waiting items, requests are refused at
// once instead of queueing without end.
func ExampleErrQueueFull() {
	started, block := make(chan struct{}), make(chan struct{})
	slow := func(_ context.Context, in []int, out []int) error {
		started <- struct{}{}
		<-block
		return nil
	}
	b := batch.New(batch.Config{MaxBatch: 1, QueueCap: 1, Policy: batch.Immediate}, slow)
	ctx, stop := context.WithCancel(context.Background())
	go b.Run(ctx)
	defer stop()
	defer close(block)

	go b.Submit(context.Background(), 1)
	<-started                            // the only worker is busy
	go b.Submit(context.Background(), 2) // waits in the queue
	for b.Len() != 1 {
		time.Sleep(time.Millisecond)
	}
	_, err := b.Submit(context.Background(), 3)
	fmt.Println(errors.Is(err, batch.ErrQueueFull))
	go func() { <-started }() // let the queued item run during shutdown
	// Output: true
}
