package generate_test

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/generate"
)

// spell is a toy decoder: whatever the prompt, it answers "hello, world"
// one letter per token, then EOS (0). Token ids are the letters' bytes.
type spell struct{}

const answer = "hello, world"

func (spell) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	for i, s := range seqs {
		if k := s.Past + len(s.Tokens) - s.PromptLen; s.Sample && k < len(answer) {
			next[i] = int32(answer[k])
		}
	}
	return nil
}
func (spell) Free(models.SeqID) {}
func (spell) Close() error      { return nil }

type bytesTok struct{}

func (bytesTok) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range s {
		ids[i] = int32(s[i])
	}
	return ids
}
func (bytesTok) TokenBytes(id int32) []byte { return []byte{byte(id)} }

var spellInfo = models.DecoderInfo{Context: 64, EOS: 0, Vocab: 256, KVTokens: 1024}

// Generate returns a stream: read its tokens as they are generated, then
// the result.
func Example() {
	e, _ := generate.New(generate.Config{MaxSeqs: 8}, spell{}, spellInfo, bytesTok{})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()

	s, err := e.Generate(context.Background(), generate.Request{Prompt: bytesTok{}.Encode("Say hi"), Stop: []string{"ld"}})
	if err != nil {
		fmt.Println(err)
		stop()
		return
	}
	var toks []generate.Token
	var texts []string
	for {
		toks, err = s.Next(context.Background(), toks[:0])
		for _, t := range toks {
			texts = append(texts, fmt.Sprintf("%q", t.Text))
		}
		if err != nil {
			break
		}
	}
	// "l" may begin the stop string "ld": it is held back until the next
	// token decides. The stop string itself is never released.
	fmt.Println(strings.Join(texts, " "))
	fmt.Println(err == io.EOF)
	res := s.Result()
	fmt.Println(res.Finish, res.PromptTokens, res.CompletionTokens)

	stop() // stop admitting, finish what was admitted
	fmt.Println(<-done)
	// Output:
	// "h" "e" "" "l" "lo" "," " " "w" "o" "r" "" ""
	// true
	// stop 6 12
	// <nil>
}

// Collect gathers a whole answer, for callers that do not stream.
func ExampleCollect() {
	e, _ := generate.New(generate.Config{}, spell{}, spellInfo, bytesTok{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go e.Run(ctx)

	s, _ := e.Generate(context.Background(), generate.Request{Prompt: []int32{'?'}, MaxTokens: 5})
	text, res, err := generate.Collect(context.Background(), s)
	fmt.Printf("%q %s %d %v\n", text, res.Finish, res.CompletionTokens, err)
	// Output: "hello" length 5 <nil>
}
