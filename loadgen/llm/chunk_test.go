package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// chunkView is a chunk's findings, comparable.
type chunkView struct {
	Choices, Content, Role, Finish, Usage bool
	Completion, Prompt                    int64
	Err                                   bool
	ErrMsg, Text                          string
	// HasCached and Cached: usage.prompt_tokens_details.cached_tokens.
	HasCached bool
	Cached    int64
}

func viewOf(c *chunk) chunkView {
	return chunkView{c.choices, c.content, c.role, c.finish, c.usage, c.completion, c.prompt, c.err, string(c.errMsg), string(c.text),
		c.cached >= 0, max(c.cached, 0)}
}

// refChunk is the semantics of chunk.parse written over encoding/json's
// generic decoding: the oracle. ok is false when encoding/json rejects the
// input or the top level is not an object.
func refChunk(data []byte) (v chunkView, ok bool, typeErr bool) {
	var top any
	if err := json.Unmarshal(data, &top); err != nil {
		var te *json.UnmarshalTypeError
		return v, false, errors.As(err, &te)
	}
	m, isObj := top.(map[string]any)
	if !isObj {
		return v, false, false
	}
	str := func(x any) string { s, _ := x.(string); return s }
	v.Prompt = -1
	if arr, isArr := m["choices"].([]any); isArr {
		v.Choices = len(arr) > 0
		for _, el := range arr {
			ch, isObj := el.(map[string]any)
			if !isObj {
				continue
			}
			text := str(ch["text"])
			out := text != ""
			v.Text += text
			for _, k := range []string{"delta", "message"} {
				d, isObj := ch[k].(map[string]any)
				if !isObj {
					continue
				}
				for _, f := range []string{"content", "reasoning_content", "reasoning"} {
					s := str(d[f])
					out = out || s != ""
					v.Text += s
				}
				if tc, isArr := d["tool_calls"].([]any); isArr && len(tc) > 0 {
					out = true
				}
				v.Role = v.Role || str(d["role"]) != ""
			}
			v.Content = v.Content || out
			v.Finish = v.Finish || str(ch["finish_reason"]) != ""
		}
	}
	countOf := func(x any) (int64, bool) {
		f, isNum := x.(float64)
		if !isNum || f < 0 || f > maxCount || f != math.Trunc(f) {
			return 0, false
		}
		return int64(f), true
	}
	if u, isObj := m["usage"].(map[string]any); isObj {
		v.Completion, v.Usage = countOf(u["completion_tokens"])
		if p, ok := countOf(u["prompt_tokens"]); ok {
			v.Prompt = p
		}
		if d, isObj := u["prompt_tokens_details"].(map[string]any); isObj {
			v.Cached, v.HasCached = countOf(d["cached_tokens"])
		}
	}
	switch e := m["error"].(type) {
	case string:
		v.Err, v.ErrMsg = e != "", e
	case map[string]any:
		v.Err, v.ErrMsg = true, str(e["message"])
	}
	if !v.Err && str(m["object"]) == "error" {
		v.Err, v.ErrMsg = true, str(m["message"])
	}
	return v, true, false
}

// Chunks as real servers send them.
var serverChunks = []struct {
	name, data string
	want       chunkView
}{
	{"vLLM completions token", `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
		chunkView{Choices: true, Content: true, Prompt: -1, Text: " Paris"}},
	{"completions empty text (a special token)", `{"choices":[{"index":0,"text":"","finish_reason":null}]}`,
		chunkView{Choices: true, Prompt: -1}},
	{"completions finish chunk", `{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`,
		chunkView{Choices: true, Finish: true, Prompt: -1}},
	{"usage chunk", `{"id":"x","object":"text_completion","choices":[],"usage":{"prompt_tokens":272,"total_tokens":472,"completion_tokens":200}}`,
		chunkView{Usage: true, Completion: 200, Prompt: 272}},
	{"vLLM chat role chunk", `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		chunkView{Choices: true, Role: true, Prompt: -1}},
	{"llama.cpp chat role chunk", `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}`,
		chunkView{Choices: true, Role: true, Prompt: -1}},
	{"TGI/Ollama chat: role with the first token", `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
		chunkView{Choices: true, Content: true, Role: true, Prompt: -1, Text: "Hel"}},
	{"chat token with escapes", `{"choices":[{"index":0,"delta":{"content":"a\n\"b\" \u00e9 \ud83d\ude00"}}]}`,
		chunkView{Choices: true, Content: true, Prompt: -1, Text: "a\n\"b\" é 😀"}},
	{"reasoning token", `{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}`,
		chunkView{Choices: true, Content: true, Prompt: -1, Text: "think"}},
	{"tool call", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
		chunkView{Choices: true, Content: true, Prompt: -1}},
	{"TGI final chunk with usage", `{"choices":[{"index":0,"delta":{"role":"assistant","content":"."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
		chunkView{Choices: true, Content: true, Role: true, Finish: true, Usage: true, Completion: 7, Prompt: 5, Text: "."}},
	{"non-streamed chat", `{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		chunkView{Choices: true, Content: true, Role: true, Finish: true, Usage: true, Completion: 2, Prompt: 3, Text: "Hi there"}},
	{"OpenAI/vLLM error", `{"error":{"message":"out of memory","type":"InternalServerError","param":null,"code":500}}`,
		chunkView{Err: true, ErrMsg: "out of memory", Prompt: -1}},
	{"TGI error", `{"error":"Request failed during generation: Server error: CUDA OOM","error_type":"generation"}`,
		chunkView{Err: true, ErrMsg: "Request failed during generation: Server error: CUDA OOM", Prompt: -1}},
	{"old vLLM error", `{"object":"error","message":"bad","type":"BadRequestError","code":400}`,
		chunkView{Err: true, ErrMsg: "bad", Prompt: -1}},
	{"null error", `{"choices":[],"error":null}`, chunkView{Prompt: -1}},
	{"usage as floats", `{"usage":{"completion_tokens":2.0e2,"prompt_tokens":-1}}`,
		chunkView{Usage: true, Completion: 200, Prompt: -1}},
	{"usage not whole", `{"usage":{"completion_tokens":2.5}}`, chunkView{Prompt: -1}},
	{"vLLM usage with cached tokens", `{"choices":[],"usage":{"prompt_tokens":2112,"total_tokens":2240,"completion_tokens":128,"prompt_tokens_details":{"cached_tokens":2048}}}`,
		chunkView{Usage: true, Completion: 128, Prompt: 2112, HasCached: true, Cached: 2048}},
	{"cached tokens null", `{"usage":{"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":null}}}`,
		chunkView{Usage: true, Completion: 1, Prompt: -1}},
	{"prompt_tokens_details null", `{"usage":{"completion_tokens":1,"prompt_tokens_details":null}}`,
		chunkView{Usage: true, Completion: 1, Prompt: -1}},
	{"repeated details: last wins", `{"usage":{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{"audio_tokens":0}}}`,
		chunkView{Prompt: -1}},
	{"repeated key: last wins", `{"choices":[{"text":"a"}],"choices":[{"text":""}]}`, chunkView{Choices: true, Prompt: -1}},
}

func TestChunk(t *testing.T) {
	var c chunk
	for _, tc := range serverChunks {
		if err := c.parse([]byte(tc.data)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := viewOf(&c); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
		if ref, _, _ := refChunk([]byte(tc.data)); ref != tc.want {
			t.Errorf("%s: the oracle says %+v", tc.name, ref)
		}
	}
}

func TestChunkRejects(t *testing.T) {
	var c chunk
	for _, in := range []string{
		``, `[]`, `"x"`, `{`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`,
		`{"a":1e}`, `{"a":tru}`, `{"a":"\x01"}`, `{"a":"\q"}`, `{"a":"\u12"}`, `{"a":"open}`, `{} x`, `{}{}`,
		`{"choices":[{"text":"a"]}`, strings.Repeat("[", 20000),
		`{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`,
	} {
		if err := c.parse([]byte(in)); err == nil {
			t.Errorf("parse(%.40q) = nil, want an error", in)
		}
	}
}

func TestChunkAllocs(t *testing.T) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1718345013,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token\n"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"completion_tokens":3}}`)
	var c chunk
	_ = c.parse(data)
	if allocs := testing.AllocsPerRun(100, func() { _ = c.parse(data) }); allocs > 0 {
		t.Errorf("parse of a chat chunk: %v allocations, want 0", allocs)
	}
}

func BenchmarkChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1718345013,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.Run("scanner", func(b *testing.B) {
		var c chunk
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			_ = c.parse(data)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v struct {
				Choices []struct {
					Delta struct {
						Role, Content string
					}
					FinishReason *string `json:"finish_reason"`
				}
			}
			_ = json.Unmarshal(data, &v)
		}
	})
}

// FuzzChunk checks chunk.parse against the oracle over encoding/json.
func FuzzChunk(f *testing.F) {
	for _, tc := range serverChunks {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c chunk
		err := c.parse(data)
		want, ok, typeErr := refChunk(data)
		switch {
		case typeErr:
			// A number out of float64's range: encoding/json refuses
			// the whole input, the scanner only such a count.
		case !ok && err == nil:
			t.Fatalf("parse(%q) = nil; encoding/json rejects it (or not an object)", data)
		case ok && err != nil:
			t.Fatalf("parse(%q) = %v; encoding/json accepts it", data, err)
		case ok && viewOf(&c) != want:
			if !utf8.Valid(data) {
				// encoding/json replaces invalid bytes as the scanner
				// does; a mismatch here is still a bug.
				t.Logf("invalid UTF-8 input")
			}
			t.Fatalf("parse(%q)\n got %+v\nwant %+v", data, viewOf(&c), want)
		}
		_ = fmt.Sprint
	})
}

func TestParseServerTiming(t *testing.T) {
	for _, tc := range []struct {
		h    string
		want serverTiming
	}{
		{"queue;dur=0.5, ttft;dur=41.25, batch;desc=8", serverTiming{queue: 500 * time.Microsecond, ttft: 41250 * time.Microsecond, timed: true}},
		{`ttft;desc="first";dur=3`, serverTiming{ttft: 3 * time.Millisecond, timed: true}},
		{"queue;dur=2, compute;dur=5", serverTiming{queue: 2 * time.Millisecond}},
		{"ttft;dur=-1, queue;dur=x", serverTiming{}},
		{"", serverTiming{}},
		{"queue;dur=0.1, ttft;dur=9, batch;desc=4, cached;desc=96", serverTiming{queue: 100 * time.Microsecond, ttft: 9 * time.Millisecond, timed: true, cached: 96, cachedOK: true}},
		{`cached;desc="0"`, serverTiming{cachedOK: true}},
		{"cached;desc=-3, cached;dur=5, cached;desc=x", serverTiming{}},
	} {
		if got := parseServerTiming(tc.h); got != tc.want {
			t.Errorf("parseServerTiming(%q) = %+v; want %+v", tc.h, got, tc.want)
		}
	}
}
