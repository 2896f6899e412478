package quant

import (
	"fmt"
	"math"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Embedding tables: a Gather that reads rows of a float32 initializer (a
// token, position or type embedding) reads them from an int8 copy, each row
// with its own scale, in standard operators:
//
//	ids ─ Gather(table_q) ─ Cast ─ Mul ─ y
//	ids ─ Gather(table_scale) ─────┘
//
// Only the rows a batch reads are turned back into float32, so the table
// stays int8 in memory: ONNX Runtime cannot fold the Gathers into constants
// (their indices are computed), and nothing dequantises the whole table.
// A row's values depend on the row alone, so a decoder stays exact under
// batching.

// lookup is a Gather chosen for quantisation.
type lookup struct {
	node  onnxgraph.Node
	table string // a float32 [rows, width] initializer
}

// tableUse is what plan learns of an initializer read by a Gather: the
// Gathers that could read it quantised, and the first node that reads it
// some other way.
type tableUse struct {
	gathers [][]lookup // by scope
	other   onnxgraph.Node
	others  bool
}

// planTables chooses the Gathers of each scope to quantise, given the
// products planned (which stop reading their float32 weights), and records
// the others with their reasons in rep and reasons.
func planTables(f *onnxgraph.File, scopes []*onnxgraph.Scope, opts Options, products [][]product, rep *Report, reasons map[string]int) [][]lookup {
	replaced := map[string]bool{} // node outputs of the planned products
	for _, ps := range products {
		for _, p := range ps {
			replaced[p.node.Outputs[0]] = true
		}
	}
	uses := map[string]*tableUse{}
	var order []string
	for i, s := range scopes {
		locals := s.Locals()
		for _, n := range s.Nodes() {
			if n.Op != "Gather" || n.Domain != "" && n.Domain != "ai.onnx" || len(n.Inputs) < 2 || locals[n.Inputs[0]] {
				continue
			}
			if _, ok := f.Initializer(n.Inputs[0]); !ok {
				continue // rows of a computed value: not a table
			}
			rep.Tables++
			why := lookupWhy(f, locals, n)
			if why == "" {
				if pat := opts.excluded(n.Name, n.Inputs[0]); pat != "" {
					why = "excluded by " + strconv.Quote(pat)
				} else if opts.KeepEmbeddings {
					why = "embedding table kept in float32"
				}
			}
			if why != "" {
				rep.Skipped = append(rep.Skipped, Skip{Node: n.Name, Reason: why})
				reasons[why]++
				continue
			}
			u := uses[n.Inputs[0]]
			if u == nil {
				u = &tableUse{gathers: make([][]lookup, len(scopes))}
				uses[n.Inputs[0]] = u
				order = append(order, n.Inputs[0])
			}
			u.gathers[i] = append(u.gathers[i], lookup{node: n, table: n.Inputs[0]})
		}
	}
	// A table another node reads in float32 (a Gather left alone, the LM
	// head kept in float32) stays: an int8 copy beside it would only add
	// memory.
	for _, s := range scopes {
		locals := s.Locals()
		for _, n := range s.Nodes() {
			if len(n.Outputs) > 0 && replaced[n.Outputs[0]] {
				continue
			}
			for j, in := range n.Inputs {
				u := uses[in]
				if u == nil || locals[in] || u.others || j == 0 && u.chosen(n) {
					continue
				}
				u.others, u.other = true, n
			}
		}
	}
	plans := make([][]lookup, len(scopes))
	for _, table := range order {
		u := uses[table]
		for i, ls := range u.gathers {
			for _, l := range ls {
				if u.others {
					why := "table also read in float32 by " + describe(u.other)
					rep.Skipped = append(rep.Skipped, Skip{Node: l.node.Name, Reason: why})
					reasons[why]++
					continue
				}
				plans[i] = append(plans[i], l)
				rep.Lookups = append(rep.Lookups, l.node.Name)
			}
		}
	}
	return plans
}

// chosen reports whether n is one of u's Gathers.
func (u *tableUse) chosen(n onnxgraph.Node) bool {
	for _, ls := range u.gathers {
		for _, l := range ls {
			if l.node.Name == n.Name && l.node.Outputs[0] == n.Outputs[0] {
				return true
			}
		}
	}
	return false
}

// describe names a node for a message: "Gemm cls_decoder".
func describe(n onnxgraph.Node) string {
	if n.Name == "" {
		return n.Op + " (unnamed)"
	}
	return n.Op + " " + n.Name
}

// lookupWhy says why the Gather n of an initializer cannot read it
// quantised, or "" when it can.
func lookupWhy(f *onnxgraph.File, locals map[string]bool, n onnxgraph.Node) string {
	in, _ := f.Initializer(n.Inputs[0])
	switch {
	case len(n.Outputs) != 1:
		return "malformed Gather"
	case in.Type != onnxgraph.Float32:
		return "table of type " + in.Type.String()
	case len(in.Dims) != 2:
		return "table of rank " + strconv.Itoa(len(in.Dims))
	case in.Dims[0] < 1 || in.Dims[1] < 1:
		return "empty table"
	case n.IntAttr("axis", 0) != 0 && n.IntAttr("axis", 0) != -2:
		return "Gather along the table's columns"
	}
	if _, ok := f.Initializer(n.Inputs[1]); ok && !locals[n.Inputs[1]] {
		return "constant indices (folded into a constant by the runtime)"
	}
	return ""
}

// lookup returns the nodes that compute l's output from the table in int8.
func (w *writer) lookup(l lookup) ([]onnxgraph.Node, error) {
	f := w.f
	q, ok := w.tables[l.table]
	if !ok {
		in, _ := f.Initializer(l.table)
		v, err := f.Float32s(l.table)
		if err != nil {
			return nil, &InputError{err}
		}
		qv, scales, err := Rows(v, int(in.Dims[0]), int(in.Dims[1]))
		if err != nil {
			return nil, inputErrorf("embedding table %q: %v", l.table, err)
		}
		q = quantized{weight: f.Unique(l.table + "_rows_int8"), scale: f.Unique(l.table + "_row_scales")}
		if err := f.SetInitializer(q.weight, onnxgraph.Int8, in.Dims, int8Bytes(qv)); err != nil {
			return nil, err
		}
		if err := f.SetInitializer(q.scale, onnxgraph.Float32, []int64{in.Dims[0], 1}, float32Bytes(scales)); err != nil {
			return nil, err
		}
		w.tables[l.table] = q
	}
	ids, y := l.node.Inputs[1], l.node.Outputs[0]
	base := l.node.Name
	if base == "" {
		base = y
	}
	rows, scales, asFloat := f.Unique(base+"_int8"), f.Unique(base+"_scales"), f.Unique(base+"_float")
	return []onnxgraph.Node{
		onnxgraph.NewNode(f.Unique(base+"_quantized"), "Gather", "", []string{q.weight, ids}, []string{rows}),
		onnxgraph.NewNode(f.Unique(base+"_scale"), "Gather", "", []string{q.scale, ids}, []string{scales}),
		onnxgraph.NewNode(f.Unique(base+"_cast"), "Cast", "", []string{rows}, []string{asFloat}, onnxgraph.Int("to", int64(onnxgraph.Float32))),
		onnxgraph.NewNode(f.Unique(base+"_rescale"), "Mul", "", []string{asFloat, scales}, []string{y}),
	}, nil
}

// Rows quantises a rows×cols float32 table w (row-major) symmetrically to
// int8 in [-127, 127], each row with its own scale: it returns the
// rows×cols int8 table and the rows scales, such that w[r][c] ≈
// q[r][c]·scale[r] within half the scale. A row of zeros has scale 1. A
// value that is not finite is an error.
func Rows(w []float32, rows, cols int) ([]int8, []float32, error) {
	if rows < 0 || cols < 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("%d values for a %d×%d table", len(w), rows, cols)
	}
	if err := finite(w); err != nil {
		return nil, nil, err
	}
	q := make([]int8, len(w))
	scales := make([]float32, rows)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		m := 0.0
		for _, v := range row {
			m = max(m, math.Abs(float64(v)))
		}
		scales[r] = symmetricScale(m)
		for c, v := range row {
			q[r*cols+c] = toInt8(v, scales[r])
		}
	}
	return q, scales, nil
}
