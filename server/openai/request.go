package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/generate"
)

// request is the body of /v1/completions and /v1/chat/completions: the
// fields served, and those refused unless left at their defaults. Other
// fields are ignored, as OpenAI-compatible servers do.
type request struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS bool   `json:"ignore_eos"`
	MinTokens int    `json:"min_tokens"`
	CacheSalt string `json:"cache_salt"` // vLLM's: the prefix cache is shared only among requests with the same salt

	N        *int            `json:"n"`
	BestOf   *int            `json:"best_of"`
	Echo     bool            `json:"echo"`
	Logprobs json.RawMessage `json:"logprobs"`
	Suffix   *string         `json:"suffix"`
	Tools    json.RawMessage `json:"tools"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Default max tokens when a request names none: OpenAI's 16 for
// completions; for chat, the rest of the context, at most what the model
// generates in half the request's deadline at its measured step cost (see
// chatDefault).
const defaultCompletionMaxTokens = 16

// chatDefault is chat's default max tokens for a request with timeout and
// room tokens left in the context: at most Config.MaxTokens, and at most
// what one sequence generates in half the timeout at the endpoint's
// measured step cost (a batch's steps cost more), so that a request forced
// to its full length (ignore_eos) can still finish in time.
func (h *handler) chatDefault(room int, timeout time.Duration) int {
	n := min(room, h.s.cfg.MaxTokens)
	if step := h.ep.step; step > 0 {
		n = min(n, max(1, int(timeout/2/step)))
	}
	return n
}

// parsed is a validated request.
type parsed struct {
	gen          generate.Request
	chat         bool
	stream       bool
	includeUsage bool
}

// parse decodes and validates a body.
func (h *handler) parse(body []byte, chat bool, timeout time.Duration) (*parsed, error) {
	if !utf8.Valid(body) {
		// JSON text must be UTF-8 (RFC 8259); Go's decoder would turn the
		// bytes into U+FFFD and the model would answer another prompt.
		return nil, invalid(http.StatusBadRequest, "", "invalid_utf8", "request body is not valid UTF-8")
	}
	if err := checkKeys(body); err != nil {
		return nil, err
	}
	var req request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalid(http.StatusUnprocessableEntity, te.Field, "invalid_type", "%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return nil, invalid(http.StatusBadRequest, "", "malformed_json", "body is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, invalid(http.StatusBadRequest, "", "malformed_json", "body holds more than one JSON value")
	}
	s := h.s
	if req.Model != "" && req.Model != s.info.Name {
		return nil, invalid(http.StatusNotFound, "model", "model_not_found", "model %q does not exist; this server serves %q", req.Model, s.info.Name)
	}
	if err := refuseUnsupported(&req); err != nil {
		return nil, err
	}
	p := &parsed{chat: chat, stream: req.Stream}
	if req.StreamOptions != nil {
		if !req.Stream {
			return nil, invalid(http.StatusUnprocessableEntity, "stream_options", "invalid_value", "stream_options needs \"stream\": true")
		}
		p.includeUsage = req.StreamOptions.IncludeUsage
	}

	var err error
	if chat {
		p.gen.Prompt, err = h.chatPrompt(req.Messages, req.Prompt)
	} else {
		p.gen.Prompt, err = h.completionPrompt(req.Prompt, req.Messages)
	}
	if err != nil {
		return nil, err
	}
	if len(p.gen.Prompt) == 0 {
		return nil, invalid(http.StatusUnprocessableEntity, "prompt", "empty_prompt", "the prompt has no tokens")
	}
	if n, ctx := len(p.gen.Prompt), s.dinfo.Context; n >= ctx { // token ids
		return nil, tooLong(ctx, n, false)
	}

	maxTokens, param := req.MaxTokens, "max_tokens"
	if chat && req.MaxCompletionTokens != nil {
		maxTokens, param = req.MaxCompletionTokens, "max_completion_tokens"
	}
	room := s.dinfo.Context - len(p.gen.Prompt)
	switch {
	case maxTokens == nil && chat:
		p.gen.MaxTokens = h.chatDefault(room, timeout)
	case maxTokens == nil:
		p.gen.MaxTokens = min(room, defaultCompletionMaxTokens)
	case *maxTokens < 1:
		return nil, invalid(http.StatusUnprocessableEntity, param, "invalid_value", "%s %d: must be at least 1", param, *maxTokens)
	case *maxTokens > s.cfg.MaxTokens:
		return nil, invalid(http.StatusUnprocessableEntity, param, "invalid_value", "%s %d: at most %d", param, *maxTokens, s.cfg.MaxTokens)
	case *maxTokens > room:
		return nil, invalid(http.StatusUnprocessableEntity, param, "context_length_exceeded",
			"%s %d is too large: the context holds %d tokens and the prompt has %d (at most %d)", param, *maxTokens, s.dinfo.Context, len(p.gen.Prompt), room)
	default:
		p.gen.MaxTokens = *maxTokens
	}
	if req.MinTokens < 0 || req.MinTokens > p.gen.MaxTokens {
		return nil, invalid(http.StatusUnprocessableEntity, "min_tokens", "invalid_value", "min_tokens %d: want 0 to max tokens (%d)", req.MinTokens, p.gen.MaxTokens)
	}
	p.gen.MinTokens, p.gen.IgnoreEOS, p.gen.CacheSalt = req.MinTokens, req.IgnoreEOS, req.CacheSalt
	if p.gen.Stop, err = parseStop(req.Stop); err != nil {
		return nil, err
	}
	if p.gen.Sampling, err = parseSampling(&req); err != nil {
		return nil, err
	}
	return p, nil
}

// refuseUnsupported refuses fields this server does not implement, unless
// they hold their defaults.
func refuseUnsupported(req *request) error {
	set := func(raw json.RawMessage) bool {
		s := string(bytes.TrimSpace(raw))
		return s != "" && s != "null" && s != "false" && s != "0"
	}
	switch {
	case req.N != nil && *req.N != 1:
		return invalid(http.StatusUnprocessableEntity, "n", "unsupported", "n %d: only one choice per request is supported", *req.N)
	case req.BestOf != nil && *req.BestOf != 1:
		return invalid(http.StatusUnprocessableEntity, "best_of", "unsupported", "best_of is not supported")
	case req.Echo:
		return invalid(http.StatusUnprocessableEntity, "echo", "unsupported", "echo is not supported")
	case set(req.Logprobs):
		return invalid(http.StatusUnprocessableEntity, "logprobs", "unsupported", "logprobs are not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return invalid(http.StatusUnprocessableEntity, "suffix", "unsupported", "suffix is not supported")
	case set(req.Tools) && string(bytes.TrimSpace(req.Tools)) != "[]":
		return invalid(http.StatusUnprocessableEntity, "tools", "unsupported", "tools are not supported")
	}
	return nil
}

// completionPrompt reads "prompt": a string, an array of one string, or an
// array of token ids.
func (h *handler) completionPrompt(raw json.RawMessage, msgs []message) ([]int32, error) {
	if msgs != nil {
		return nil, invalid(http.StatusUnprocessableEntity, "messages", "invalid_field", "messages belong to /v1/chat/completions; send \"prompt\" here")
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid(http.StatusUnprocessableEntity, "prompt", "missing_prompt", "\"prompt\" is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return h.encode(text)
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil {
		if len(texts) == 0 {
			return nil, nil // an empty array: no tokens (refused by parse)
		}
		if len(texts) != 1 {
			return nil, invalid(http.StatusUnprocessableEntity, "prompt", "unsupported", "%d prompts: only one prompt per request is supported", len(texts))
		}
		return h.encode(texts[0])
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		for _, id := range ids {
			if id < 0 || int(id) >= h.s.dinfo.Vocab {
				return nil, invalid(http.StatusUnprocessableEntity, "prompt", "invalid_value", "token id %d outside the vocabulary (0 to %d)", id, h.s.dinfo.Vocab-1)
			}
		}
		return ids, nil
	}
	return nil, invalid(http.StatusUnprocessableEntity, "prompt", "invalid_type", "\"prompt\": want a string, an array of one string, or an array of token ids")
}

// chatPrompt renders "messages" through a plain template, one
// "role: content" line per message, then "assistant:".
func (h *handler) chatPrompt(msgs []message, prompt json.RawMessage) ([]int32, error) {
	if len(bytes.TrimSpace(prompt)) > 0 && string(bytes.TrimSpace(prompt)) != "null" {
		return nil, invalid(http.StatusUnprocessableEntity, "prompt", "invalid_field", "prompt belongs to /v1/completions; send \"messages\" here")
	}
	if len(msgs) == 0 {
		return nil, invalid(http.StatusUnprocessableEntity, "messages", "missing_messages", "\"messages\" is required and must not be empty")
	}
	var b strings.Builder
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		default:
			return nil, invalid(http.StatusUnprocessableEntity, fmt.Sprintf("messages[%d].role", i), "invalid_value", "role %q: want system, developer, user or assistant", m.Role)
		}
		content, err := messageText(m.Content)
		if err != nil {
			return nil, invalid(http.StatusUnprocessableEntity, fmt.Sprintf("messages[%d].content", i), "invalid_type", "%v", err)
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(content)
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return h.encode(b.String())
}

// messageText reads a message's content: a string, or an array of text
// parts.
func messageText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content: want a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q: only text is supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// parseStop reads "stop": a string or an array of strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stops []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		stops = []string{one}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, invalid(http.StatusUnprocessableEntity, "stop", "invalid_type", "\"stop\": want a string or an array of strings")
	}
	if len(stops) > generate.MaxStops {
		return nil, invalid(http.StatusUnprocessableEntity, "stop", "invalid_value", "%d stop strings: at most %d", len(stops), generate.MaxStops)
	}
	for _, s := range stops {
		if len(s) == 0 || len(s) > generate.MaxStopLen {
			return nil, invalid(http.StatusUnprocessableEntity, "stop", "invalid_value", "stop string of %d bytes: want 1 to %d", len(s), generate.MaxStopLen)
		}
	}
	return stops, nil
}

func parseSampling(req *request) (models.Sampling, error) {
	sp := models.Sampling{Temperature: 1, TopP: 1}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return sp, invalid(http.StatusUnprocessableEntity, "temperature", "invalid_value", "temperature %v: want 0 to 2", *t)
		}
		sp.Temperature = float32(*t)
	}
	if p := req.TopP; p != nil {
		if *p <= 0 || *p > 1 {
			return sp, invalid(http.StatusUnprocessableEntity, "top_p", "invalid_value", "top_p %v: want more than 0, at most 1", *p)
		}
		sp.TopP = float32(*p)
	}
	if req.Seed != nil {
		sp.Seed = uint64(*req.Seed)
	} else {
		sp.Seed = rand.Uint64()
	}
	return sp, nil
}
