package scenario

// Positions in a scenario file: errors at a line, the line of a key from
// its path, and typo suggestions for unknown keys.

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/inferhq/infer/internal/suggest"
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

// yamlError turns a decoding error into a *ScenarioError at its token. A
// value of the wrong type is named by its key's path in root (nil: the
// file was not parsed) and the kind of value wanted.
func yamlError(file string, root ast.Node, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		tok := ye.GetToken()
		msg := ye.GetMessage()
		var uf *yaml.UnknownFieldError
		var te *yaml.TypeError
		switch {
		case errors.As(err, &uf):
			if places := keyPlaces()[tok.Value]; len(places) > 0 {
				// A key of the schema, in the wrong section.
				msg += " here: it is a key of " + listPlaces(places)
			} else if s := suggestKey(tok.Value); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		case errors.As(err, &te) && te.DstType != nil:
			p, n := pathOf(root, tok, "$")
			got := strconv.Quote(tok.Value)
			switch n.(type) {
			case *ast.SequenceNode:
				got = "(a list)"
			case *ast.MappingNode, *ast.MappingValueNode:
				got = "(a mapping)"
			}
			msg = fmt.Sprintf("%s: want %s", got, kindWanted(te.DstType))
			if p != "" {
				msg = key(p) + " " + msg
			}
		}
		return &ScenarioError{File: file, Line: tok.Position.Line, Column: tok.Position.Column, Msg: msg}
	}
	return &ScenarioError{File: file, Msg: err.Error()}
}

// kindWanted says what a value of type t is written as.
func kindWanted(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping of keys"
	}
	return "a " + t.String()
}

// pathOf returns the path ("$.load.interleave", "$.load.rate[1]") and the
// node of the value whose token is tok under n at path, or "" and nil.
func pathOf(n ast.Node, tok *token.Token, path string) (string, ast.Node) {
	if n == nil {
		return "", nil
	}
	if n.GetToken() == tok {
		return path, n
	}
	switch m := n.(type) {
	case *ast.MappingNode:
		for _, e := range m.Values {
			if p, v := pathOf(e, tok, path); v != nil {
				return p, v
			}
		}
	case *ast.MappingValueNode:
		return pathOf(m.Value, tok, path+"."+m.Key.GetToken().Value)
	case *ast.SequenceNode:
		for i, e := range m.Values {
			if p, v := pathOf(e, tok, fmt.Sprintf("%s[%d]", path, i)); v != nil {
				return p, v
			}
		}
	}
	return "", nil
}

// suggestKey returns the known key closest to key, if it is a likely typo.
func suggestKey(key string) string { return suggest.Closest(key, knownKeys()) }

// knownKeys returns every key of the file's schema, from the YAML tags of
// fileScenario and of the structs it holds, so that a key added there is
// suggested too.
func knownKeys() []string { return slices.Sorted(maps.Keys(keyPlaces())) }

// listPlaces says places in a sentence: "sweep", "server and sweep",
// "target, server and sweep", "a, b and 3 more sections".
func listPlaces(places []string) string {
	if n := len(places); n > 3 {
		return fmt.Sprintf("%s, %s and %d more sections", places[0], places[1], n-2)
	}
	if n := len(places); n > 1 {
		return strings.Join(places[:n-1], ", ") + " and " + places[n-1]
	}
	return places[0]
}

// keyPlaces returns where each key of the file's schema may be written: the
// paths of the sections that take it ("sweep", "payload.output_tokens",
// "the top level").
func keyPlaces() map[string][]string {
	places := map[string][]string{}
	yamlKeys(reflect.TypeFor[fileScenario](), "", places)
	return places
}

// yamlKeys adds the YAML keys of struct type t, at path, and of the
// structs its fields hold (through pointers, slices and lists) to places.
func yamlKeys(t reflect.Type, path string, places map[string][]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if k == "-" {
			continue
		}
		if k == "" {
			yamlKeys(f.Type, path, places) // inlined
			continue
		}
		where := path
		if where == "" {
			where = "the top level"
		}
		if !slices.Contains(places[k], where) {
			places[k] = append(places[k], where)
		}
		yamlKeys(f.Type, strings.TrimPrefix(path+"."+k, "."), places)
	}
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
