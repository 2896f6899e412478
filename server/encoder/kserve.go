package encoder

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
)

// The KServe v2 / Triton HTTP protocol on the batched path. The model takes
// one BYTES input tensor of texts (named "text"; a lone input may have any
// name) and returns one output tensor: FP32 [n, dim] when every output is a
// vector, otherwise BYTES [n] holding each output as JSON. Errors follow the
// protocol's shape, {"error": "message"}, with this server's status codes.

const v2ModelVersion = "1"

func (s *Service) v2Routes(m *server.Mount, ep *endpoint) {
	m.Handle("/v2", server.Only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server.WriteJSON(w, http.StatusOK, map[string]any{"name": "infer", "version": s.cfg.Version, "extensions": []string{}})
	})))
	m.Handle("/v2/health/live", server.Only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server.WriteJSON(w, http.StatusOK, map[string]bool{"live": true})
	})))
	m.Handle("/v2/health/ready", server.Only(http.MethodGet, http.HandlerFunc(s.v2Ready)))
	m.Handle("/v2/models/{name}", server.Only(http.MethodGet, s.v2Model(s.v2Metadata)))
	m.Handle("/v2/models/{name}/versions/{version}", server.Only(http.MethodGet, s.v2Model(s.v2Metadata)))
	m.Handle("/v2/models/{name}/ready", server.Only(http.MethodGet, s.v2Model(s.v2Ready)))
	m.Handle("/v2/models/{name}/versions/{version}/ready", server.Only(http.MethodGet, s.v2Model(s.v2Ready)))
	infer := s.v2Model(s.v2Infer(ep))
	m.Handle("/v2/models/{name}/infer", server.Only(http.MethodPost, infer))
	m.Handle("/v2/models/{name}/versions/{version}/infer", server.Only(http.MethodPost, infer))
}

// v2Model answers 404 unless the path names the served model (and version).
func (s *Service) v2Model(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, version := r.PathValue("name"), r.PathValue("version")
		if name != s.info.Name || (version != "" && version != v2ModelVersion) {
			writeV2Error(w, server.Errorf(http.StatusNotFound, "not_found", "model %q version %q not found; this server serves %q version %q",
				name, version, s.info.Name, v2ModelVersion))
			return
		}
		h(w, r)
	})
}

func (s *Service) v2Ready(w http.ResponseWriter, r *http.Request) {
	if !s.serving() {
		server.WriteJSON(w, http.StatusServiceUnavailable, map[string]bool{"ready": false})
		return
	}
	server.WriteJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func (s *Service) v2Metadata(w http.ResponseWriter, r *http.Request) {
	server.WriteJSON(w, http.StatusOK, struct {
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

func (s *Service) v2OutputName() string {
	if s.info.Task != "" {
		return s.info.Task
	}
	return "output"
}

// v2Input is one input tensor of a v2 inference request.
type v2Input struct {
	Name     string          `json:"name"`
	Shape    []int64         `json:"shape"`
	Datatype string          `json:"datatype"`
	Data     json.RawMessage `json:"data"`
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

func (s *Service) v2Infer(ep *endpoint) http.HandlerFunc {
	return s.answer(ep, writeV2Error, func(r *http.Request, arrived time.Time) (any, timing, error) {
		id, outs, st, err := s.inferV2(r, ep, arrived)
		if err != nil {
			return nil, st, err
		}
		return v2Response{ModelName: s.info.Name, ModelVersion: v2ModelVersion, ID: id, Outputs: []v2Output{s.v2Tensor(outs)}}, st, nil
	})
}

// inferV2 runs a v2 inference request and returns its id with the outputs.
func (s *Service) inferV2(r *http.Request, ep *endpoint, arrived time.Time) (string, []models.Output, timing, error) {
	ctx, cancel, body, err := s.open(r, arrived)
	if err != nil {
		return "", nil, timing{}, err
	}
	defer cancel()
	if r.Header.Get("Inference-Header-Content-Length") != "" {
		body.Release()
		return "", nil, timing{}, server.Errorf(http.StatusBadRequest, "unsupported", "the binary tensor data extension is not supported; send JSON")
	}
	items, id, err := decodeV2(body.Bytes())
	body.Release()
	if err != nil {
		return id, nil, timing{}, err
	}
	outs, st, err := s.compute(ctx, ep, items)
	return id, outs, st, err
}

// decodeV2 returns the texts of a v2 inference request and its id. It is
// strict: known fields only, each once and spelled exactly; one BYTES input
// (named "text" when there are several names); a concrete shape whose
// product is the number of strings; nested data shaped exactly as the shape
// says (flat data in row-major order is accepted too).
func decodeV2(body []byte) ([]string, string, error) {
	if err := checkJSONText(body); err != nil {
		return nil, "", err
	}
	fields, err := strictObject(body, "id", "inputs", "outputs", "parameters")
	if err != nil {
		return nil, "", err
	}
	var id string
	if raw, ok := fields["id"]; ok {
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, "", server.Errorf(http.StatusBadRequest, "invalid_body", `"id" must be a string`)
		}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(fields["inputs"], &raws); err != nil || len(raws) == 0 {
		return nil, id, server.Errorf(http.StatusBadRequest, "invalid_inputs", `"inputs" must be a non-empty array of tensors`)
	}
	inputs := make([]v2Input, len(raws))
	names := make(map[string]bool, len(raws))
	for i, raw := range raws {
		tf, err := strictObject(raw, "name", "shape", "datatype", "data", "parameters")
		if err != nil {
			return nil, id, err
		}
		in := &inputs[i]
		if json.Unmarshal(tf["name"], &in.Name) != nil || json.Unmarshal(tf["shape"], &in.Shape) != nil || json.Unmarshal(tf["datatype"], &in.Datatype) != nil {
			return nil, id, server.Errorf(http.StatusBadRequest, "invalid_inputs", `input %d: want "name" (string), "shape" (integers), "datatype" (string) and "data"`, i)
		}
		in.Data = tf["data"]
		if names[in.Name] {
			return nil, id, server.Errorf(http.StatusBadRequest, "invalid_inputs", "input %q appears twice", in.Name)
		}
		names[in.Name] = true
	}
	in := 0
	if len(inputs) > 1 {
		in = -1
		for i := range inputs {
			if inputs[i].Name == "text" {
				in = i
			}
		}
		for i := range inputs {
			if i != in {
				return nil, id, server.Errorf(http.StatusBadRequest, "invalid_inputs", `unexpected input %q: this model takes one input tensor, "text"`, inputs[i].Name)
			}
		}
	}
	t := inputs[in]
	if t.Datatype != "BYTES" {
		return nil, id, server.Errorf(http.StatusBadRequest, "invalid_datatype", "input %q has datatype %q; want BYTES", t.Name, t.Datatype)
	}
	if len(t.Shape) == 0 {
		return nil, id, server.Errorf(http.StatusBadRequest, "shape_mismatch", "input %q: no shape", t.Name)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return nil, id, server.Errorf(http.StatusBadRequest, "shape_mismatch", "input %q: shape %v: dimensions must be concrete (≥ 0)", t.Name, t.Shape)
		}
	}
	var data any
	if err := json.Unmarshal(t.Data, &data); err != nil {
		return nil, id, server.Errorf(http.StatusBadRequest, "malformed_json", "input %q: data is not JSON: %v", t.Name, err)
	}
	items, serr := shapedStrings(data, t.Shape)
	if serr != nil {
		return nil, id, server.Errorf(serr.Status, serr.Code, "input %q: %s", t.Name, serr.Message)
	}
	return items, id, checkItems(items)
}

// shapedStrings returns the strings of data in row-major order: a flat
// array of product(shape) strings, or arrays nested exactly as shape says.
func shapedStrings(data any, shape []int64) ([]string, *server.Error) {
	arr, ok := data.([]any)
	if !ok {
		return nil, server.Errorf(http.StatusUnprocessableEntity, "invalid_inputs", "data must be an array of strings")
	}
	n, ok := shapeSize(shape, len(arr))
	flat := true
	for _, e := range arr {
		if _, isArr := e.([]any); isArr {
			flat = false
			break
		}
	}
	if flat {
		if !ok || n != len(arr) {
			return nil, server.Errorf(http.StatusBadRequest, "shape_mismatch", "shape %v does not match %d data items", shape, len(arr))
		}
		items := make([]string, len(arr))
		for i, e := range arr {
			if items[i], ok = e.(string); !ok {
				return nil, server.Errorf(http.StatusUnprocessableEntity, "invalid_inputs", "data must hold strings only")
			}
		}
		return items, nil
	}
	var items []string
	var walk func(v any, dims []int64) *server.Error
	walk = func(v any, dims []int64) *server.Error {
		if len(dims) == 0 {
			s, ok := v.(string)
			if !ok {
				if _, isArr := v.([]any); isArr {
					return server.Errorf(http.StatusBadRequest, "shape_mismatch", "data is nested deeper than shape %v", shape)
				}
				return server.Errorf(http.StatusUnprocessableEntity, "invalid_inputs", "data must hold strings only")
			}
			items = append(items, s)
			return nil
		}
		a, ok := v.([]any)
		if !ok || int64(len(a)) != dims[0] {
			return server.Errorf(http.StatusBadRequest, "shape_mismatch", "data is ragged or does not match shape %v", shape)
		}
		for _, e := range a {
			if err := walk(e, dims[1:]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(data, shape); err != nil {
		return nil, err
	}
	return items, nil
}

// shapeSize returns the product of shape, and false when it exceeds limit
// (a product that would overflow does).
func shapeSize(shape []int64, limit int) (int, bool) {
	n := int64(1)
	for _, d := range shape {
		if d == 0 {
			return 0, true
		}
		if n > int64(limit)/d {
			return 0, false
		}
		n *= d
	}
	return int(n), n <= int64(limit)
}

// v2Tensor packs outputs into one tensor: FP32 [n, dim] for vectors of one
// length, else BYTES [n] of JSON texts.
func (s *Service) v2Tensor(outs []models.Output) v2Output {
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
func writeV2Error(w http.ResponseWriter, e *server.Error) {
	server.WriteErrorJSON(w, e.Status, e.RetryAfter, map[string]string{"error": e.Message})
}
