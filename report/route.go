package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/inferhq/infer/loadgen/record"
)

// route.png: the policies of a router side by side (infer bench with
// server.replicas and sweep.route_policy, or a front with
// target.replicas), a row per load level: output tokens/s, TTFT p50, p90
// and p99, and each replica's share of the requests.

// routeFile is the chart's file.
const routeFile = "route.png"

// isRouted reports whether the run went through a front to replicas whose
// shares it read, or swept a router's policies.
func (v *view) isRouted() bool {
	return slices.ContainsFunc(v.recs, func(r *record.Record) bool {
		return r.LLM != nil && (r.Point.RoutePolicy != "" || len(r.LLM.Replicas) > 0)
	})
}

// routeName is a point's policy: its router's, else its front's address.
func routeName(r *record.Record) string {
	if r.Point.RoutePolicy != "" {
		return r.Point.RoutePolicy
	}
	if len(r.Point.Targets) > 0 {
		return hostOf(r.Point.Targets[0])
	}
	return r.Point.Endpoint
}

// hostOf is the host:port of a URL like http://127.0.0.1:8080/v1/...
func hostOf(u string) string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// routeRows are the routed points by load level, each row's in the run's
// order of policies; the best of a policy's points at a level (several
// when other settings vary) by output tokens/s.
func (v *view) routeRows() ([]record.Load, [][]*record.Record) {
	var loads []record.Load
	rows := map[record.Load][]*record.Record{}
	for _, r := range v.recs {
		if r.LLM == nil || (r.Point.RoutePolicy == "" && len(r.LLM.Replicas) == 0) {
			continue
		}
		l := r.Point.Load
		if _, ok := rows[l]; !ok {
			loads = append(loads, l)
		}
		row := rows[l]
		i := slices.IndexFunc(row, func(o *record.Record) bool { return routeName(o) == routeName(r) })
		switch {
		case i < 0:
			rows[l] = append(row, r)
		case r.LLM.OutputTokensPerS > row[i].LLM.OutputTokensPerS:
			row[i] = r
		}
	}
	slices.SortFunc(loads, compareLoad)
	loads = panelLoads(loads, maxRouteRows)
	out := make([][]*record.Record, len(loads))
	for i, l := range loads {
		out[i] = rows[l]
	}
	return loads, out
}

// maxRouteRows bounds the load levels drawn.
const maxRouteRows = 3

// ttftShades are TTFT p50, p90 and p99's colours, light to dark.
var ttftShades = []color.Color{
	color.RGBA{158, 202, 225, 255},
	color.RGBA{66, 146, 198, 255},
	color.RGBA{8, 69, 148, 255},
}

// replicaColor is the i-th replica's colour in the share panel.
func replicaColor(i int) color.Color { return workerColors[i%len(workerColors)] }

func (v *view) routeChart() (*figure, string) {
	loads, rows := v.routeRows()
	if len(loads) == 0 {
		return nil, "no point went through a router to replicas (server.replicas, or target.replicas)"
	}
	f := &figure{title: "Routing policies side by side", cols: 3}
	replicas, flagged := 0, false
	for li, row := range rows {
		names := make([]string, len(row))
		for i, r := range row {
			names[i] = tickName(routeName(r))
			flagged = flagged || !trusted(r)
			replicas = max(replicas, len(r.LLM.Replicas))
		}
		at := loadLabel(loads[li])
		xs := func(p *bars, i int, off float64) { p.x = append(p.x, float64(i)+off) }
		// Output tokens/s.
		p := newPlot("Output tokens/s, "+at, "", "output tokens/s")
		policyAxis(p, names)
		b := &bars{width: 0.6, color: batchedColor}
		var lx, ly []float64
		var lt []string
		hi := 0.0
		for i, r := range row {
			val := r.LLM.OutputTokensPerS
			xs(b, i, 0)
			b.bottom, b.top = append(b.bottom, 0), append(b.top, val)
			txt := record.Short(val)
			if !trusted(r) {
				txt += "*"
			}
			lx, ly, lt = append(lx, float64(i)), append(ly, val), append(lt, txt)
			hi = max(hi, val)
		}
		linearAxis(&p.Y, 0, max(hi, 1), 0.22)
		p.Add(b, newLabels(lx, ly, lt, 9, 0, 5, draw.XCenter))
		f.panels = append(f.panels, p)

		// TTFT p50, p90, p99.
		p = newPlot("TTFT, "+at, "", "time to first token (ms)")
		policyAxis(p, names)
		const w = 0.26
		lo, hi := math.Inf(1), 0.0
		var tb []*bars
		lx, ly, lt = nil, nil, nil
		for q, get := range []func(record.MsStats) float64{
			func(m record.MsStats) float64 { return m.P50 },
			func(m record.MsStats) float64 { return m.P90 },
			func(m record.MsStats) float64 { return m.P99 },
		} {
			b := &bars{width: w, color: ttftShades[q]}
			for i, r := range row {
				val := get(r.LLM.TTFT)
				xs(b, i, (float64(q)-1)*w)
				b.bottom, b.top = append(b.bottom, 0), append(b.top, val)
				if q == 1 { // p90 named: the figure the policies are judged by
					lx, ly, lt = append(lx, float64(i)), append(ly, val), append(lt, strings.ReplaceAll(fmtMs(val), " ", ""))
				}
				if val > 0 {
					lo, hi = min(lo, val), max(hi, val)
				}
			}
			tb = append(tb, b)
		}
		if hi == 0 {
			hi, lo = 1, 1
		}
		if needsLog(lo, hi) {
			logAxis(&p.Y, lo, hi*1.6, false)
			for i := range ly {
				ly[i] = max(ly[i], p.Y.Min)
			}
		} else {
			linearAxis(&p.Y, 0, hi, 0.22)
		}
		for _, b := range tb {
			p.Add(b)
		}
		p.Add(newLabels(lx, ly, lt, 9, 0, 5, draw.XCenter))
		f.panels = append(f.panels, p)

		// Each replica's share of the requests.
		p = newPlot("Requests per replica, "+at, "", "share of the requests (%)")
		shareNames := slices.Clone(names)
		hi = 0
		var rb []*bars
		for i, r := range row {
			shares := r.LLM.Replicas
			if len(shares) == 0 {
				continue
			}
			bw := 0.8 / float64(len(shares))
			total := 0.0
			for _, s := range shares {
				total += s.Requests
			}
			if total <= 0 {
				continue
			}
			for k, s := range shares {
				for len(rb) <= k {
					rb = append(rb, &bars{width: bw, color: replicaColor(len(rb))})
				}
				val := 100 * s.Requests / total
				xs(rb[k], i, -0.4+bw*(float64(k)+0.5))
				rb[k].bottom, rb[k].top = append(rb[k].bottom, 0), append(rb[k].top, val)
				hi = max(hi, val)
			}
			_, _, cv := record.Balance(shares, func(s record.ReplicaShare) float64 { return s.Requests })
			shareNames[i] += fmt.Sprintf("\ncv %.2f", cv)
			if h := hitRate(shares); h >= 0 {
				shareNames[i] += fmt.Sprintf("\nhit %.0f%%", 100*h)
			}
		}
		policyAxis(p, shareNames)
		if len(rb) > 0 {
			p.Add(hline(100/float64(len(rb)), line(noteColor, 1, 3, 3)))
		}
		linearAxis(&p.Y, 0, max(hi, 1), 0.1)
		for _, b := range rb {
			p.Add(b)
		}
		f.panels = append(f.panels, p)
	}
	for q, name := range []string{"TTFT p50", "TTFT p90 (named)", "TTFT p99"} {
		f.add(name, thumb{fill: ttftShades[q]})
	}
	for k := range replicas {
		f.add(fmt.Sprintf("replica %d", k+1), thumb{fill: replicaColor(k)})
	}
	f.note("Each policy ran on fresh replicas (cold caches). The share panel's dashed line is an even split; under each policy, cv is the coefficient of variation of the requests per replica (0: even) and hit the replicas' prefix-cache hit rate (prompt tokens found cached).")
	if flagged {
		f.note("Values marked * rest on a flagged measurement: see summary.md.")
	}
	return f, ""
}

// policyAxis names p's x axis's places by the policies.
func policyAxis(p *plot.Plot, names []string) {
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.X.Tick.Label.Font.Size = vg.Points(9)
}

// tickName is a policy's name as a tick label: a long hyphenated one on
// two lines ("round-\nrobin"), so that six fit under a panel.
func tickName(name string) string {
	if len(name) > 7 {
		return strings.Replace(name, "-", "-\n", 1)
	}
	return name
}

// hitRate is the replicas' prefix-cache hit rate together, -1 when none
// reported a lookup.
func hitRate(shares []record.ReplicaShare) float64 {
	var q, h float64
	for _, s := range shares {
		q, h = q+s.PrefixQueries, h+s.PrefixHits
	}
	if q <= 0 {
		return -1
	}
	return h / q
}

// routeSummary is summary.md's section on the policies: a row per policy
// and load level.
func (v *view) routeSummary(b *strings.Builder) {
	loads, rows := v.routeRows()
	if len(loads) == 0 {
		return
	}
	b.WriteString("## Routing policies\n\n")
	b.WriteString("| load | policy | output tokens/s | TTFT p50 | TTFT p90 | TTFT p99 | requests per replica | cv | prefix hit rate |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---|---:|---:|\n")
	for li, row := range rows {
		row = slices.Clone(row)
		slices.SortStableFunc(row, func(a, b *record.Record) int { return cmp.Compare(b.LLM.OutputTokensPerS, a.LLM.OutputTokensPerS) })
		for _, r := range row {
			var parts []string
			for _, s := range r.LLM.Replicas {
				parts = append(parts, fmt.Sprintf("%.0f", s.Requests))
			}
			_, _, cv := record.Balance(r.LLM.Replicas, func(s record.ReplicaShare) float64 { return s.Requests })
			hit := "—"
			if h := hitRate(r.LLM.Replicas); h >= 0 {
				hit = fmt.Sprintf("%.1f%%", 100*h)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %.2f | %s |\n", loadLabel(loads[li]), routeName(r), record.Short(r.LLM.OutputTokensPerS),
				fmtMs(r.LLM.TTFT.P50), fmtMs(r.LLM.TTFT.P90), fmtMs(r.LLM.TTFT.P99), strings.Join(parts, " / "), cv, hit)
		}
	}
	b.WriteString("\n")
}
