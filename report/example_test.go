package report_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/report"
)

// A run reported against a baseline run: the charts written, and the
// verdict a CI job prints (and fails on, if it wants).
func ExampleWrite() {
	run, err := record.ReadRun("testdata/sim-slow")
	if err != nil {
		log.Fatal(err)
	}
	baseline, err := record.ReadRun("testdata/sim")
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "report")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Options{} draws 1200×800 charts; smaller ones here keep the example quick.
	res, err := report.Write(context.Background(), run, baseline, dir, report.Options{Width: 600, Height: 400})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range res.Charts {
		if c.Skipped != "" {
			fmt.Printf("%s: not drawn: %s\n", c.File, c.Skipped)
			continue
		}
		fmt.Println(c.File)
	}
	fmt.Println("best:", res.Best.Point.Name)
	fmt.Println(res.Comparison.Line())
	// Output:
	// throughput.png
	// latency.png
	// naive-vs-batched.png
	// throughput-latency.png
	// server-time.png
	// pareto.png
	// comparison.png
	// best: batched b=16 w=4 rate=400
	// regression: 110 regression, 0 warn, 35 pass
}

// Compare alone: a point 20 % slower than its baseline is a regression,
// unless its measurement is flagged.
func ExampleCompare() {
	at := func(thr float64, flags ...string) record.Record {
		return record.Record{
			Point:      record.Point{Endpoint: "batched", Batch: 32, Workers: 2, Load: record.Load{Mode: "open", Rate: 400}, Items: 1},
			Sent:       4000,
			Throughput: thr,
			Status:     map[string]int{"200": 4000},
			Valid:      len(flags) == 0,
			Flags:      flags,
		}
	}
	base := &record.Run{Records: []record.Record{at(400)}}
	for _, cur := range []record.Record{at(390), at(320), at(320, record.FlagCoordinatedOmission)} {
		c := report.Compare(&record.Run{Records: []record.Record{cur}}, base, report.Noise{})
		fmt.Printf("%s: %s\n", c.Verdict, c.Changes[0].Reason)
	}
	// Output:
	// pass: within noise or better
	// regression: throughput −20.0 % beyond ±10.0 %
	// warn: throughput −20.0 % beyond ±10.0 %, but run point coordinated-omission
}
