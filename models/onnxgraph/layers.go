package onnxgraph

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The pieces below are what the transformer generators (models/bert,
// models/gpt2) build alike.

// Add appends x + y and returns its output.
func (g *Graph) Add(x, y string) string { return g.Node("Add", []string{x, y}) }

// Mul appends x · y (elementwise) and returns its output.
func (g *Graph) Mul(x, y string) string { return g.Node("Mul", []string{x, y}) }

// MatMul appends the matrix product x·y and returns its output.
func (g *Graph) MatMul(x, y string) string { return g.Node("MatMul", []string{x, y}) }

// LayerNorm appends a LayerNormalization over the last axis of x, whose
// size is width, with a learned scale (prefix.weight, 1) and shift
// (prefix.bias, 0), and returns its output.
func (g *Graph) LayerNorm(prefix, x string, width int64, epsilon float32) string {
	gamma := g.Weight(prefix+".weight", []int64{width}, Fill(1))
	beta := g.Weight(prefix+".bias", []int64{width}, Fill(0))
	return g.Node("LayerNormalization", []string{x, gamma, beta}, Int("axis", -1), Float("epsilon", epsilon))
}

// LayerShape returns a transformer's depth and width in the notation of the
// BERT miniatures: "L4/H256/A4" for 4 layers, hidden size 256 and 4 heads.
func LayerShape(layers, hidden, heads int) string {
	return "L" + strconv.Itoa(layers) + "/H" + strconv.Itoa(hidden) + "/A" + strconv.Itoa(heads)
}

// CheckArch reports an architecture the generators cannot build: a name
// unfit for a file name (lower-case letters, digits, '-', '_' and '.'), a
// size below 1 (hidden, heads and the others in sizes), or heads that do not divide the hidden size.
func CheckArch(name string, hidden, heads int, sizes ...int) error {
	switch {
	case name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}):
		return fmt.Errorf("architecture name %q: want lower-case letters, digits, '-', '_' or '.'", name)
	case hidden < 1 || heads < 1 || slices.ContainsFunc(sizes, func(n int) bool { return n < 1 }):
		return fmt.Errorf("architecture %s: every size must be at least 1", name)
	case hidden%heads != 0:
		return fmt.Errorf("architecture %s: %d heads do not divide hidden size %d", name, heads, hidden)
	}
	return nil
}
