package cmd

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/scenario"
)

// printSearchPlan lists the configurations a capacity search searches,
// and its bounds.
func printSearchPlan(w io.Writer, sc *scenario.Scenario) error {
	s := sc.Load.Search
	plans := loadgen.SearchPlans(sc)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tCONFIGURATION\tSERVER")
	for i, p := range plans {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", i, loadgen.ConfigName(sc, p.Point), serverText(sc, p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	per := sc.Load.Warmup + sc.Load.Duration
	what := fmt.Sprintf("%d configurations, each", len(plans))
	if len(plans) == 1 {
		what = "1 configuration,"
	}
	_, err := fmt.Fprintf(w, "%s searched over %s from %s to %s: growing ×%g, then halving to within %g %%, "+
		"at most %d levels of up to %d measurements; load time at most %v (%d × %d × %d × %v)\n",
		what, s.Over, loadgen.LevelText(s.Over, s.From), loadgen.LevelText(s.Over, s.To), s.Growth, 100*s.Tolerance,
		s.MaxPoints, s.Repeats, time.Duration(len(plans)*s.MaxPoints*s.Repeats)*per, len(plans), s.MaxPoints, s.Repeats, per)
	return err
}
