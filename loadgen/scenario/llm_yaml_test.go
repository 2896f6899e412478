package scenario_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/inferhq/infer/loadgen/llm"
)

// TestLLMPayloadYAML checks that the llm payload types decode from
// scenario YAML the way Parse decodes (strict, errors at their line), for
// when phase 2 adds the payload keys.
func TestLLMPayloadYAML(t *testing.T) {
	type payload struct {
		API          llm.API    `yaml:"api"`
		PromptTokens llm.Length `yaml:"prompt_tokens"`
		OutputTokens llm.Length `yaml:"output_tokens"`
	}
	decode := func(src string) (payload, error) {
		var p payload
		f, err := parser.ParseBytes([]byte(src), 0)
		if err != nil {
			return p, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(nil), yaml.DisallowUnknownField())
		return p, dec.DecodeFromNode(f.Docs[0].Body, &p)
	}
	p, err := decode("api: chat\nprompt_tokens: {dist: uniform, min: 100, max: 300}\noutput_tokens: 128\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.API != llm.Chat || p.PromptTokens != (llm.Length{Dist: "uniform", Min: 100, Max: 300}) || p.OutputTokens != llm.Fixed(128) {
		t.Errorf("decoded %+v", p)
	}
	p, err = decode("output_tokens:\n  dist: lognormal\n  median: 138\n  sigma: 0.8\n  max: 1024\n")
	if err != nil || p.OutputTokens != (llm.Length{Dist: "lognormal", Median: 138, Sigma: 0.8, Max: 1024}) {
		t.Errorf("lognormal: %+v, %v", p.OutputTokens, err)
	}
	for _, tc := range []struct{ src, want string }{
		{"api: completion\n", "want completions or chat"},
		{"output_tokens: 0\n", "count 0"},
		{"\noutput_tokens: {dist: uniform, min: 5, max: 2}\n", "min 5 > max 2"},
		{"output_tokens: {dist: uniform, min: 1, max: 2, mean: 3}\n", "mean"},
		{"output_tokens: {dist: gaussian, min: 1, max: 2}\n", "dist \"gaussian\""},
	} {
		_, err := decode(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.src, err, tc.want)
		}
	}
}
