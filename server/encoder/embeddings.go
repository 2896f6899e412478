package encoder

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
)

// OpenAI's embeddings API, for a model with an embedding head (Info.Task
// models.TaskEmbed): POST /v1/embeddings on the batched path, and
// /naive/v1/embeddings on the naive one. A request's inputs are its items,
// batched as /batched batches them (a request of many inputs may span
// batches), answered from the result cache like any other item.
//
//	{"input": "text" | ["text", ...], "model": "use-lite",
//	 "encoding_format": "float" | "base64", "dimensions": 512, "user": "..."}
//
// The body is strict: those fields only, each once and spelled exactly.
// "model", when given, must be the served model's name; "dimensions", when
// given, must be the model's (its vectors cannot be shortened); "user" is
// accepted and not used. Token arrays (OpenAI's pre-tokenized inputs) are
// refused: the server tokenizes. Errors are in OpenAI's shape.

// embeddingsFields are the fields a request may hold.
var embeddingsFields = []string{"input", "model", "encoding_format", "dimensions", "user"}

type embeddingsResponse struct {
	Object string      `json:"object"`
	Data   []embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32
}

// embeddingsRequest is a decoded request.
type embeddingsRequest struct {
	inputs []string
	base64 bool
}

func (s *Service) embeddingsRoutes(m *server.Mount, naive, batched *endpoint) {
	m.Handle("/v1/embeddings", server.Only(http.MethodPost, s.embeddingsHandler(batched)))
	m.Handle("/naive/v1/embeddings", server.Only(http.MethodPost, s.embeddingsHandler(naive)))
	m.Paths("/v1/embeddings", "/naive/v1/embeddings")
}

func (s *Service) embeddingsHandler(ep *endpoint) http.Handler {
	return s.answer(ep, writeOpenAIError, func(r *http.Request, arrived time.Time) (any, timing, error) {
		ctx, cancel, body, err := s.open(r, arrived)
		if err != nil {
			return nil, timing{}, err
		}
		defer cancel()
		req, err := s.decodeEmbeddings(body.Bytes())
		body.Release()
		if err != nil {
			return nil, timing{}, err
		}
		outs, st, err := s.compute(ctx, ep, req.inputs)
		if err != nil {
			return nil, st, err
		}
		resp := embeddingsResponse{Object: "list", Data: make([]embedding, len(outs)), Model: s.info.Name}
		for i, o := range outs {
			v, ok := o.([]float32)
			if !ok {
				return nil, st, server.Errorf(http.StatusInternalServerError, "model_error", "the model's output %d is not a vector", i)
			}
			e := embedding{Object: "embedding", Index: i, Embedding: v}
			if req.base64 {
				e.Embedding = base64Floats(v)
			}
			resp.Data[i] = e
		}
		resp.Usage.PromptTokens, resp.Usage.TotalTokens = st.tokens, st.tokens
		return resp, st, nil
	})
}

// decodeEmbeddings reads an embeddings request body.
func (s *Service) decodeEmbeddings(body []byte) (embeddingsRequest, error) {
	var req embeddingsRequest
	body = bytes.TrimPrefix(body, utf8BOM)
	if err := checkJSONText(body); err != nil {
		return req, err
	}
	fields, err := strictObject(body, embeddingsFields...)
	if err != nil {
		return req, err
	}
	if raw, ok := present(fields, "model"); ok {
		var name string
		if json.Unmarshal(raw, &name) != nil {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_model", `"model" must be a string`)
		}
		if name != "" && name != s.info.Name {
			return req, server.Errorf(http.StatusNotFound, "model_not_found", "model %q does not exist; this server serves %q", name, s.info.Name)
		}
	}
	if raw, ok := present(fields, "encoding_format"); ok {
		var f string
		if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_encoding_format", `"encoding_format" must be "float" or "base64"`)
		}
		req.base64 = f == "base64"
	}
	if raw, ok := present(fields, "user"); ok {
		var u string
		if json.Unmarshal(raw, &u) != nil {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_user", `"user" must be a string`)
		}
	}
	if raw, ok := present(fields, "dimensions"); ok {
		var d int
		if json.Unmarshal(raw, &d) != nil {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_dimensions", `"dimensions" must be a whole number`)
		}
		if dims := int(s.dims.Load()); d != dims {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_dimensions",
				"dimensions %d: %s gives vectors of %d dimensions and cannot shorten them; leave \"dimensions\" out or send %d", d, s.info.Name, dims, dims)
		}
	}
	raw, ok := present(fields, "input")
	if !ok {
		return req, server.Errorf(http.StatusUnprocessableEntity, "missing_input", `body has no "input": send {"input": "text"} or {"input": ["text", ...]}`)
	}
	switch raw[0] {
	case '"':
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return req, server.Errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
		}
		req.inputs = []string{one}
	case '[':
		if err := json.Unmarshal(raw, &req.inputs); err != nil {
			return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_input",
				`"input" must be a string or an array of strings (token arrays are not accepted: send text)`)
		}
		if len(req.inputs) == 0 {
			return req, server.Errorf(http.StatusUnprocessableEntity, "empty_input", `"input" is an empty array: send at least one text`)
		}
	default:
		return req, server.Errorf(http.StatusUnprocessableEntity, "invalid_input", `"input" must be a string or an array of strings`)
	}
	return req, checkItems(req.inputs)
}

// present returns the value of field key unless it is absent or null.
func present(fields map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	raw := bytes.TrimSpace(fields[key])
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false
	}
	return raw, true
}

// base64Floats encodes v as OpenAI's base64 format does: the float32 values
// little-endian, one after the other.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// openAIError is an error in OpenAI's shape.
type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// paramOf names the request field an error code is about, for OpenAI's
// "param".
var paramOf = map[string]string{
	"missing_input": "input", "invalid_input": "input", "empty_input": "input", "no_inputs": "input",
	"too_many_items": "input", "input_too_long": "input", "bad_encoding": "input",
	"invalid_model": "model", "model_not_found": "model",
	"invalid_encoding_format": "encoding_format", "invalid_dimensions": "dimensions", "invalid_user": "user",
}

// writeOpenAIError answers e in OpenAI's error shape, {"error": {"message",
// "type", "param", "code"}}, with e's status.
func writeOpenAIError(w http.ResponseWriter, e *server.Error) {
	typ := "invalid_request_error"
	switch {
	case e.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case e.Status == http.StatusServiceUnavailable:
		typ = "service_unavailable"
	case e.Status == http.StatusGatewayTimeout:
		typ = "timeout"
	case e.Status >= 500:
		typ = "server_error"
	}
	body := openAIError{Message: e.Message, Type: typ, Code: e.Code}
	if p, ok := paramOf[e.Code]; ok {
		body.Param = &p
	}
	server.WriteErrorJSON(w, e.Status, e.RetryAfter, struct {
		Error openAIError `json:"error"`
	}{body})
}

// embeds reports whether the model's outputs are vectors.
func (s *Service) embeds() bool { return s.info.Task == models.TaskEmbed }
