package target

import (
	"strings"
	"testing"
)

func TestEndpoints(t *testing.T) {
	for _, tc := range []struct {
		endpoint, canonical, path, batchLabel string
	}{
		{"naive", "naive", "/naive", "naive"},
		{"batched", "batched", "/batched", "batched"},
		{"v2", "v2", "/v2/models/bert%2Fmini/infer", "batched"},
		{"/v2/models/m/infer", "v2", "/v2/models/m/infer", "batched"},
		{"/v2/models//infer", "", "/v2/models//infer", ""},
		{"/predict", "", "/predict", ""},
	} {
		if got := Canonical(tc.endpoint); got != tc.canonical {
			t.Errorf("Canonical(%q) = %q, want %q", tc.endpoint, got, tc.canonical)
		}
		if got := Path(tc.endpoint, "bert/mini"); got != tc.path {
			t.Errorf("Path(%q) = %q, want %q", tc.endpoint, got, tc.path)
		}
		if got := BatchLabel(tc.endpoint); got != tc.batchLabel {
			t.Errorf("BatchLabel(%q) = %q, want %q", tc.endpoint, got, tc.batchLabel)
		}
	}
	for _, tc := range []struct{ endpoint, prefix, label string }{
		{EndpointContinuous, "", "v1"},
		{EndpointStatic, "/static", "static"},
		{EndpointNaive, "/naive", "naive"},
		{"/v1", "", "v1"},
		{"/v1/", "", "v1"},
		{"/static/v1", "/static", "static"},
		{"/api/v1", "/api", ""},
	} {
		if got := LLMPrefix(tc.endpoint); got != tc.prefix {
			t.Errorf("LLMPrefix(%q) = %q, want %q", tc.endpoint, got, tc.prefix)
		}
		if got := GenLabel(tc.endpoint); got != tc.label {
			t.Errorf("GenLabel(%q) = %q, want %q", tc.endpoint, got, tc.label)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"code":"queue_full","message":"..."}}`: "queue_full",
		`{"error":"not ready"}`:                           "not ready",
		`{"error":"` + strings.Repeat("x", 81) + `"}`:     "",
		`{"error":{}}`: "",
		`oops`:         "",
		``:             "",
	} {
		if got := ErrorCode([]byte(body)); got != want {
			t.Errorf("ErrorCode(%.40q) = %q, want %q", body, got, want)
		}
	}
}
