package openai_test

import (
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/openai"
)

// The official OpenAI Go client streams from the server by base URL alone.
func TestOpenAIClientStreams(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{})
	for _, prefix := range []string{"/v1/", "/static/v1/", "/naive/v1/"} {
		client := oai.NewClient(option.WithBaseURL(ts.URL+prefix), option.WithAPIKey("unused"), option.WithMaxRetries(0))

		// Completions: the streamed text equals the whole answer.
		params := oai.CompletionNewParams{
			Model:       oai.CompletionNewParamsModel("sim-lm"),
			Prompt:      oai.CompletionNewParamsPromptUnion{OfString: oai.String("The quick brown fox")},
			MaxTokens:   oai.Int(12),
			Temperature: oai.Float(0),
		}
		whole, err := client.Completions.New(t.Context(), params)
		if err != nil {
			t.Fatalf("%s completions: %v", prefix, err)
		}
		stream := client.Completions.NewStreaming(t.Context(), params)
		var b strings.Builder
		finish := ""
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) > 0 {
				b.WriteString(c.Choices[0].Text)
				if c.Choices[0].FinishReason != "" {
					finish = string(c.Choices[0].FinishReason)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("%s stream: %v", prefix, err)
		}
		if b.String() != whole.Choices[0].Text || finish != "length" || whole.Usage.CompletionTokens != 12 {
			t.Errorf("%s streamed %q (%s), whole %q (%d tokens)", prefix, b.String(), finish, whole.Choices[0].Text, whole.Usage.CompletionTokens)
		}

		// Chat, with usage, through the client's accumulator.
		chat := client.Chat.Completions.NewStreaming(t.Context(), oai.ChatCompletionNewParams{
			Model:               "sim-lm",
			Messages:            []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("Be brief."), oai.UserMessage("Hello!")},
			MaxCompletionTokens: oai.Int(7),
			Temperature:         oai.Float(0),
			StreamOptions:       oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		})
		var acc oai.ChatCompletionAccumulator
		for chat.Next() {
			acc.AddChunk(chat.Current())
		}
		if err := chat.Err(); err != nil {
			t.Fatalf("%s chat stream: %v", prefix, err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Choices[0].Message.Role != "assistant" ||
			acc.Choices[0].FinishReason != "length" || acc.Usage.CompletionTokens != 7 || acc.Usage.PromptTokens == 0 {
			t.Errorf("%s chat: %+v usage %+v", prefix, acc.Choices, acc.Usage)
		}

		models, err := client.Models.List(t.Context())
		if err != nil || len(models.Data) != 1 || models.Data[0].ID != "sim-lm" {
			t.Errorf("%s models: %v %v", prefix, models, err)
		}
	}
}

// The official client reads the prefix cache's work: a second request
// sharing a long prompt reports usage.prompt_tokens_details.cached_tokens,
// whole and streamed, and its answer equals the first's.
func TestOpenAIClientReadsCachedTokens(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{})
	client := oai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	system := strings.Repeat("You are a careful assistant who answers in one short sentence. ", 12)
	params := oai.CompletionNewParams{
		Model:       oai.CompletionNewParamsModel("sim-lm"),
		Prompt:      oai.CompletionNewParamsPromptUnion{OfString: oai.String(system + "Why is the sky blue?")},
		MaxTokens:   oai.Int(8),
		Temperature: oai.Float(0),
	}
	first, err := client.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	n := second.Usage.PromptTokens
	want := (n - 1) / 16 * 16 // the full blocks before the last prompt token
	if first.Usage.PromptTokensDetails.CachedTokens != 0 || second.Usage.PromptTokensDetails.CachedTokens != want || want < 128 {
		t.Errorf("cached tokens %d then %d of %d prompt tokens, want 0 then %d", first.Usage.PromptTokensDetails.CachedTokens,
			second.Usage.PromptTokensDetails.CachedTokens, n, want)
	}
	if first.Choices[0].Text != second.Choices[0].Text {
		t.Errorf("a hit answered %q, the miss %q", second.Choices[0].Text, first.Choices[0].Text)
	}

	// Chat, streamed with usage: the same system message is cached.
	chat := func(question string) oai.ChatCompletionAccumulator {
		s := client.Chat.Completions.NewStreaming(t.Context(), oai.ChatCompletionNewParams{
			Model:               "sim-lm",
			Messages:            []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(system), oai.UserMessage(question)},
			MaxCompletionTokens: oai.Int(5),
			Temperature:         oai.Float(0),
			StreamOptions:       oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		})
		var acc oai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return acc
	}
	a, b := chat("Hello!"), chat("Goodbye!")
	if a.Usage.PromptTokensDetails.CachedTokens != 0 || b.Usage.PromptTokensDetails.CachedTokens < 128 {
		t.Errorf("streamed chat: cached tokens %d then %d, want 0 then at least 128", a.Usage.PromptTokensDetails.CachedTokens, b.Usage.PromptTokensDetails.CachedTokens)
	}
}
