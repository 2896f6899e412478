package onnx

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/wordpiece"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// TestServedPaddingInvariance serves generated BERT models with the real
// runtime and tokenizer through the real server, and checks that an input's
// output is the same alone and batched with longer inputs, through /naive and
// /batched, within 1e-4: the classic bug of attending to padding.
func TestServedPaddingInvariance(t *testing.T) {
	cache := t.TempDir()
	company := []string{longer[0], short, longer[2]}
	for _, task := range bert.Tasks() {
		t.Run(string(task), func(t *testing.T) {
			url := serveBuiltin(t, cache, task, false)
			var results [][]json.RawMessage
			for _, ep := range []string{"/naive", "/batched"} {
				alone := post(t, url+ep, []string{short})
				batched := post(t, url+ep, company)
				results = append(results, alone, batched[1:2])
			}
			want := decode(t, task, results[0][0])
			for _, r := range results[1:] {
				assertClose(t, decode(t, task, r[0]), want, 1e-4)
			}
		})
	}
}

// serveBuiltin serves bert-tiny with the task's head on a loopback port
// until the test ends, and returns its URL once it is ready.
func serveBuiltin(t *testing.T, cache string, task bert.Task, rejectLong bool) string {
	t.Helper()
	arch, err := bert.Lookup("bert-tiny")
	if err != nil {
		t.Fatal(err)
	}
	path, err := bert.Ensure(cache, bert.Spec{Arch: arch, Task: task})
	if err != nil {
		t.Fatal(err)
	}
	requireRuntime(t)
	f, err := New(Config{Path: path, Name: "bert-tiny", Tokenizer: wordpiece.BertBaseUncased(), RejectLong: rejectLong})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	svc, err := encoder.New(encoder.Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: 20 * time.Millisecond}}, f)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, server.Config{}, svc).URL
}

// TestServedBadInput: awkward inputs through the real server get a
// documented 4xx or a defined result, never a 500.
func TestServedBadInput(t *testing.T) {
	cache := t.TempDir()
	fillMask := serveBuiltin(t, cache, bert.FillMask, false)
	strict := serveBuiltin(t, cache, bert.FillMask, true)
	embed := serveBuiltin(t, cache, bert.Embed, false)
	long := "[MASK] " + strings.Repeat("word ", 2000) // 10 007 characters, 2002 tokens
	for _, tc := range []struct {
		name, url, contentType, body string
		want                         int
	}{
		{"empty", fillMask, "text/plain", "", 422},
		{"whitespace only", fillMask, "text/plain", " \n\t ", 422},
		{"empty JSON item", fillMask, "application/json", `{"inputs": ["ok [MASK]", ""]}`, 422},
		{"10000 characters, truncated", fillMask, "text/plain", long, 200},
		{"10000 characters, --truncate=false", strict, "text/plain", long, 413},
		{"emoji", fillMask, "text/plain", "I 😀 the [MASK] 🇫🇷 👍🏽", 200},
		{"CJK", fillMask, "text/plain", "东京是日本的[MASK]。", 200},
		{"invalid UTF-8 text", fillMask, "text/plain", "caf\xe9 [MASK] \xff", 400},
		{"invalid UTF-8 in JSON", fillMask, "application/json", "{\"inputs\": [\"caf\xe9 [MASK]\"]}", 400},
		{"fill-mask without [MASK]", fillMask, "text/plain", "Paris is the capital of France.", 422},
		{"embed without [MASK]", embed, "text/plain", "Paris is the capital of France.", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(tc.url+"/batched", tc.contentType, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, raw)
			}
			if tc.want != 200 && !strings.Contains(string(raw), `"error"`) {
				t.Errorf("error body %s: want a JSON error", raw)
			}
		})
	}
}

func post(t *testing.T, url string, inputs []string) []json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"inputs": inputs})
	resp, err := http.Post(url, "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	var r struct{ Outputs []json.RawMessage }
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Outputs) != len(inputs) {
		t.Fatalf("POST %s: %s (%v), want %d outputs", url, raw, err, len(inputs))
	}
	return r.Outputs
}

// decode returns a served output as Predict returns it.
func decode(t *testing.T, task bert.Task, raw json.RawMessage) models.Output {
	t.Helper()
	var out models.Output = &FillMask{}
	if task == bert.Embed {
		out = &[]float32{}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	if v, ok := out.(*[]float32); ok {
		return *v
	}
	if fm := out.(*FillMask); len(fm.Masks) != 1 || len(fm.Masks[0].Candidates) != TopK || fm.Masks[0].Candidates[0].Token == "" {
		t.Fatalf("fill-mask result %s: want one mask with %d named candidates", raw, TopK)
	}
	return out
}
