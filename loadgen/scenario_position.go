package loadgen

// Positions in a scenario file: errors at a line, the line of a key from
// its path, and typo suggestions for unknown keys.

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// ScenarioError is a problem in a scenario file, at a line when known.
type ScenarioError struct {
	File   string // "" when parsed from bytes
	Line   int    // from 1; 0 when unknown
	Column int
	Msg    string
}

func (e *ScenarioError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("scenario")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// yamlError turns a decoding error into a *ScenarioError at its token.
func yamlError(file string, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		pos := ye.GetToken().Position
		msg := ye.GetMessage()
		var uf *yaml.UnknownFieldError
		if errors.As(err, &uf) {
			if s := suggest(ye.GetToken().Value); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		return &ScenarioError{File: file, Line: pos.Line, Column: pos.Column, Msg: msg}
	}
	return &ScenarioError{File: file, Msg: err.Error()}
}

// suggest returns the known key closest to key, if it is a likely typo.
func suggest(key string) string {
	best, bestD := "", 3
	for _, k := range knownKeys() {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// knownKeys returns every key of the file's schema, from the YAML tags of
// fileScenario and of the structs it holds, so that a key added there is
// suggested too.
func knownKeys() []string { return yamlKeys(reflect.TypeFor[fileScenario](), nil) }

// yamlKeys appends the YAML keys of struct type t and of the structs its
// fields hold (through pointers, slices and lists).
func yamlKeys(t reflect.Type, keys []string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return keys
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" {
			keys = append(keys, k)
		}
		keys = yamlKeys(f.Type, keys)
	}
	return keys
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// find returns the token of the key or element at path, or nil.
func find(n ast.Node, path string) *token.Token {
	var tok *token.Token
	rest := strings.TrimPrefix(path, "$")
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "."):
			name := rest[1:]
			if i := strings.IndexAny(name, ".["); i >= 0 {
				name = name[:i]
			}
			rest = rest[1+len(name):]
			var entries []*ast.MappingValueNode
			switch m := n.(type) {
			case *ast.MappingNode:
				entries = m.Values
			case *ast.MappingValueNode:
				entries = []*ast.MappingValueNode{m}
			}
			n = nil
			for _, e := range entries {
				if e.Key.GetToken().Value == name {
					n, tok = e.Value, e.Key.GetToken()
				}
			}
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			seq, ok := n.(*ast.SequenceNode)
			if end < 0 || err != nil || !ok || i >= len(seq.Values) {
				return nil
			}
			rest = rest[end+1:]
			n, tok = seq.Values[i], seq.Values[i].GetToken()
		default:
			return nil
		}
		if n == nil {
			return nil
		}
	}
	return tok
}

func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return "$"
}

// key renders a YAML path as the key a user wrote: "$.load.rate[1]" → "load.rate[1]".
func key(path string) string { return strings.TrimPrefix(path, "$.") }
