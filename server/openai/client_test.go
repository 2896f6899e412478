package openai_test

import (
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server/openai"
)

// The official OpenAI Go client streams from the server by base URL alone.
func TestOpenAIClientStreams(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, "")
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
