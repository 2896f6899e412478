// Command genvocab extracts the WordPiece vocabulary of bert-base-uncased from
// the tokenizer.json shipped by the Go module
// github.com/clems4ever/all-minilm-l6-v2-go (package minilm finds it) and
// writes it as vocab.txt: one token per line,
// line n holding the token with id n, the layout of BERT's own vocab.txt.
//
// It runs through go:generate in package wordpiece:
//
//	go generate ./models/wordpiece
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/inferhq/infer/models/wordpiece/internal/minilm"
)

func main() {
	in := flag.String("in", "", "tokenizer.json to read (default: the one in "+minilm.Module+")")
	out := flag.String("o", "vocab.txt", "file to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "genvocab:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" {
		var err error
		if in, err = minilm.TokenizerJSON(); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	vocab, err := extract(data)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, []byte(strings.Join(vocab, "\n")+"\n"), 0o644)
}

// extract returns the WordPiece vocabulary of a HuggingFace tokenizer.json,
// indexed by id. The ids must be dense (0..n-1) and no token may contain a
// line break, so that vocab.txt round-trips.
func extract(data []byte) ([]string, error) {
	var tj struct {
		Model struct {
			Type  string           `json:"type"`
			Vocab map[string]int32 `json:"vocab"`
		} `json:"model"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&tj); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if tj.Model.Type != "WordPiece" {
		return nil, fmt.Errorf("model type %q, want WordPiece", tj.Model.Type)
	}
	vocab := make([]string, len(tj.Model.Vocab))
	for tok, id := range tj.Model.Vocab {
		if id < 0 || int(id) >= len(vocab) || vocab[id] != "" {
			return nil, fmt.Errorf("token %q: id %d is out of range or taken: ids must be 0..%d, each once", tok, id, len(vocab)-1)
		}
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return nil, fmt.Errorf("token id %d: %q cannot be written as a line", id, tok)
		}
		vocab[id] = tok
	}
	return vocab, nil
}
