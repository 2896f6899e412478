package target

import (
	"encoding/json"
	"net/url"
	"strings"
)

// infer serve's endpoints as a sweep names them. An encoder server has
// naive, batched and v2 (KServe v2, /v2/models/NAME/infer); a generation
// server has one scheduler at each path prefix, the endpoints below. Any
// other endpoint is a URL path (an encoder's) or prefix (an LLM's).
const (
	EndpointContinuous = "continuous" // /v1/… (the --gen-policy engine, continuous by default)
	EndpointStatic     = "static"     // /static/v1/…
	EndpointNaive      = "naive"      // /naive/v1/…
)

// How a 200 answer of an encoder endpoint is checked.
const (
	ExpectStatus = "status" // any body
	ExpectInfer  = "infer"  // infer's shape: one output per item sent
	ExpectKServe = "kserve" // a KServe v2 answer to a KServe v2 request
)

// Canonical returns the infer endpoint that a sweep endpoint names:
// "naive", "batched" or "v2" (also for a /v2/models/NAME/infer path), or
// "" for another path.
func Canonical(e string) string {
	switch {
	case e == "naive" || e == "batched" || e == "v2":
		return e
	case strings.HasPrefix(e, "/v2/models/") && strings.HasSuffix(e, "/infer") && len(e) > len("/v2/models//infer"):
		return "v2"
	}
	return ""
}

// Path returns the URL path of an encoder endpoint; model names the model
// for v2.
func Path(endpoint, model string) string {
	switch endpoint {
	case "naive", "batched":
		return "/" + endpoint
	case "v2":
		return "/v2/models/" + url.PathEscape(model) + "/infer"
	default:
		return endpoint
	}
}

// BatchLabel is the endpoint label under which an encoder server counts a
// sweep endpoint's batches in /metrics: v2 requests (also by their path)
// run in the batched endpoint's batches. Other paths have none ("").
func BatchLabel(endpoint string) string {
	switch Canonical(endpoint) {
	case "naive":
		return "naive"
	case "batched", "v2":
		return "batched"
	}
	return ""
}

// LLMPrefix returns the path prefix under a server's base URL of an LLM
// endpoint, to which the client adds /v1/completions or
// /v1/chat/completions.
func LLMPrefix(endpoint string) string {
	switch endpoint {
	case EndpointContinuous:
		return ""
	case EndpointStatic, EndpointNaive:
		return "/" + endpoint
	}
	return strings.TrimSuffix(strings.TrimSuffix(endpoint, "/"), "/v1")
}

// GenLabel returns the endpoint label under which an infer generation
// server counts an LLM endpoint's requests in its infer_gen_* metrics
// (v1, static or naive), or "" for another path.
func GenLabel(endpoint string) string {
	switch LLMPrefix(endpoint) {
	case "":
		return "v1"
	case "/static":
		return "static"
	case "/naive":
		return "naive"
	}
	return ""
}

// ErrorCode returns the code of an infer error body ({"error": {"code":
// …}}) or the message of a KServe v2 one ({"error": "…"}), if short; ""
// for any other body.
func ErrorCode(body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return ""
	}
	var obj struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(e.Error, &obj) == nil && obj.Code != "" {
		return obj.Code
	}
	var msg string
	if json.Unmarshal(e.Error, &msg) == nil && len(msg) <= 80 {
		return msg
	}
	return ""
}
