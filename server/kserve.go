package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/inferhq/infer/models"
)

// The KServe v2 / Triton HTTP protocol on the batched path. The model takes
// one BYTES input tensor of texts (named "text"; a lone input may have any
// name) and returns one output tensor: FP32 [n, dim] when every output is a
// vector, otherwise BYTES [n] holding each output as JSON. Errors follow the
// protocol's shape, {"error": "message"}, with this server's status codes.

const v2ModelVersion = "1"

func (s *Server) v2Routes(mux *http.ServeMux) {
	mux.Handle("/v2", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"name": "infer", "version": s.cfg.Version, "extensions": []string{}})
	})))
	mux.Handle("/v2/health/live", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})))
	mux.Handle("/v2/health/ready", only(http.MethodGet, http.HandlerFunc(s.v2Ready)))
	mux.Handle("/v2/models/{name}", only(http.MethodGet, s.v2Model(s.v2Metadata)))
	mux.Handle("/v2/models/{name}/versions/{version}", only(http.MethodGet, s.v2Model(s.v2Metadata)))
	mux.Handle("/v2/models/{name}/ready", only(http.MethodGet, s.v2Model(s.v2Ready)))
	mux.Handle("/v2/models/{name}/versions/{version}/ready", only(http.MethodGet, s.v2Model(s.v2Ready)))
	mux.Handle("/v2/models/{name}/infer", only(http.MethodPost, s.v2Model(s.v2Infer)))
	mux.Handle("/v2/models/{name}/versions/{version}/infer", only(http.MethodPost, s.v2Model(s.v2Infer)))
}

// v2Model answers 404 unless the path names the served model (and version).
func (s *Server) v2Model(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, version := r.PathValue("name"), r.PathValue("version")
		if name != s.info.Name || (version != "" && version != v2ModelVersion) {
			writeV2Error(w, errorf(http.StatusNotFound, "not_found", "model %q version %q not found; this server serves %q version %q",
				name, version, s.info.Name, v2ModelVersion))
			return
		}
		h(w, r)
	})
}

func (s *Server) v2Ready(w http.ResponseWriter, r *http.Request) {
	if !s.serving() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]bool{"ready": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func (s *Server) v2Metadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Name     string         `json:"name"`
		Versions []string       `json:"versions"`
		Platform string         `json:"platform"`
		Inputs   []v2TensorMeta `json:"inputs"`
		Outputs  []v2TensorMeta `json:"outputs"`
	}{
		Name:     s.info.Name,
		Versions: []string{v2ModelVersion},
		Platform: "infer_" + s.info.Backend,
		Inputs:   []v2TensorMeta{{Name: "text", Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs:  []v2TensorMeta{{Name: s.v2OutputName(), Datatype: "BYTES", Shape: []int64{-1}}},
	})
}

func (s *Server) v2OutputName() string {
	if s.info.Task != "" {
		return s.info.Task
	}
	return "output"
}

type v2Request struct {
	ID     string `json:"id,omitempty"`
	Inputs []struct {
		Name     string          `json:"name"`
		Shape    []int64         `json:"shape"`
		Datatype string          `json:"datatype"`
		Data     json.RawMessage `json:"data"`
	} `json:"inputs"`
}

type v2Output struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Data     any     `json:"data"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

func (s *Server) v2Infer(w http.ResponseWriter, r *http.Request) {
	em := s.metrics.eps[endpointV2]
	arrived := time.Now()
	em.inFlight.Inc()
	defer em.inFlight.Dec()
	var id string
	outs, st, err := s.infer(r, endpointBatched, arrived, func(body []byte) ([]string, error) {
		if r.Header.Get("Inference-Header-Content-Length") != "" {
			return nil, errorf(http.StatusBadRequest, "unsupported", "the binary tensor data extension is not supported; send JSON")
		}
		items, reqID, err := decodeV2(body)
		id = reqID
		return items, err
	})
	if err != nil {
		e := s.toAPIError(err)
		writeV2Error(w, e)
		em.answered(e, time.Since(arrived))
		return
	}
	w.Header().Set("Server-Timing", serverTiming(st))
	writeJSON(w, http.StatusOK, v2Response{
		ModelName:    s.info.Name,
		ModelVersion: v2ModelVersion,
		ID:           id,
		Outputs:      []v2Output{s.v2Tensor(outs)},
	})
	em.request(http.StatusOK, time.Since(arrived))
}

// decodeV2 returns the texts of a v2 inference request and its id.
func decodeV2(body []byte) ([]string, string, error) {
	var req v2Request
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, "", errorf(http.StatusBadRequest, "invalid_body", "not a v2 inference request: field %q has the wrong type", te.Field)
		}
		return nil, "", errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
	}
	in := -1
	switch {
	case len(req.Inputs) == 1:
		in = 0
	default:
		for i := range req.Inputs {
			if req.Inputs[i].Name == "text" {
				in = i
			}
		}
	}
	if in < 0 {
		return nil, req.ID, errorf(http.StatusBadRequest, "invalid_inputs", `want one input tensor (named "text"), got %d`, len(req.Inputs))
	}
	t := req.Inputs[in]
	if t.Datatype != "BYTES" {
		return nil, req.ID, errorf(http.StatusBadRequest, "invalid_datatype", "input %q has datatype %q; want BYTES", t.Name, t.Datatype)
	}
	var data any
	if err := json.Unmarshal(t.Data, &data); err != nil {
		return nil, req.ID, errorf(http.StatusBadRequest, "malformed_json", "input %q: data is not JSON: %v", t.Name, err)
	}
	items, ok := flattenStrings(data, nil)
	if !ok {
		return nil, req.ID, errorf(http.StatusUnprocessableEntity, "invalid_inputs", "input %q: data must hold strings only", t.Name)
	}
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	if len(t.Shape) == 0 || n != int64(len(items)) {
		return nil, req.ID, errorf(http.StatusBadRequest, "shape_mismatch", "input %q: shape %v does not match %d data items", t.Name, t.Shape, len(items))
	}
	return items, req.ID, checkItems(items)
}

// flattenStrings appends the strings of a nested JSON array in row-major order.
func flattenStrings(v any, acc []string) ([]string, bool) {
	switch x := v.(type) {
	case string:
		return append(acc, x), true
	case []any:
		for _, e := range x {
			var ok bool
			if acc, ok = flattenStrings(e, acc); !ok {
				return nil, false
			}
		}
		return acc, true
	default:
		return nil, false
	}
}

// v2Tensor packs outputs into one tensor: FP32 [n, dim] for vectors of one
// length, else BYTES [n] of JSON texts.
func (s *Server) v2Tensor(outs []models.Output) v2Output {
	name := s.v2OutputName()
	if flat, dim, ok := vectors(outs); ok {
		return v2Output{Name: name, Datatype: "FP32", Shape: []int64{int64(len(outs)), int64(dim)}, Data: flat}
	}
	data := make([]string, len(outs))
	for i, o := range outs {
		if str, ok := o.(string); ok {
			data[i] = str
			continue
		}
		b, err := json.Marshal(o)
		if err != nil {
			b = []byte("null")
		}
		data[i] = string(bytes.TrimSpace(b))
	}
	return v2Output{Name: name, Datatype: "BYTES", Shape: []int64{int64(len(outs))}, Data: data}
}

func vectors(outs []models.Output) ([]float32, int, bool) {
	dim := -1
	var flat []float32
	for _, o := range outs {
		v, ok := o.([]float32)
		if !ok || (dim >= 0 && len(v) != dim) {
			return nil, 0, false
		}
		dim = len(v)
		flat = append(flat, v...)
	}
	return flat, dim, dim >= 0
}

// writeV2Error answers in the v2 protocol's error shape.
func writeV2Error(w http.ResponseWriter, e *apiError) {
	if e.Status == statusClientClosed {
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, map[string]string{"error": e.Message})
}
