package route

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/inferhq/infer/server"
)

// modelsTimeout bounds the gathering of the replicas' model lists.
const modelsTimeout = 5 * time.Second

// Bounds of a replica's model list as read.
const (
	maxModelsBody = 1 << 20
	maxModels     = 1024
)

// models answers GET <route>/models with every ready replica's models
// merged by id (the first replica's entry of each id), and with one, GET
// <route>/models/{model} with that model's entry.
func (rt *Router) models(route string, one bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rt.track.enter() {
			rt.refuse(w, newError(http.StatusServiceUnavailable, "draining", "the router is shutting down"))
			return
		}
		defer rt.track.leave()
		cands := rt.candidates(nil, nil)
		if len(cands) == 0 {
			rt.refuse(w, newError(http.StatusServiceUnavailable, "no_replica", "%v", rt.noReplica(rt.Replicas())))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(modelsTimeout, rt.limits.Timeout))
		defer cancel()
		lists := make([][]json.RawMessage, len(cands))
		var wg sync.WaitGroup
		for i, c := range cands {
			wg.Go(func() { lists[i] = rt.modelList(ctx, c, route+"/models") })
		}
		wg.Wait()
		var data []json.RawMessage
		seen := map[string]bool{}
		answered := false
		for _, l := range lists {
			answered = answered || l != nil
			for _, m := range l {
				var id struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(m, &id) != nil || id.ID == "" || seen[id.ID] || len(data) >= maxModels {
					continue
				}
				seen[id.ID] = true
				data = append(data, m)
				if one && id.ID == r.PathValue("model") {
					server.WriteJSON(w, http.StatusOK, m)
					return
				}
			}
		}
		switch {
		case !answered:
			rt.refuse(w, newError(http.StatusBadGateway, "upstream_unreachable", "no replica answered %s/models", route))
		case one:
			e := newError(http.StatusNotFound, "model_not_found", "no replica serves the model %q", r.PathValue("model"))
			e.Param = new(string)
			*e.Param = "model"
			writeError(w, e)
		default:
			if data == nil {
				data = []json.RawMessage{}
			}
			server.WriteJSON(w, http.StatusOK, struct {
				Object string            `json:"object"`
				Data   []json.RawMessage `json:"data"`
			}{"list", data})
		}
	})
}

// modelList returns the data of r's model list, nil if it did not answer
// one.
func (rt *Router) modelList(ctx context.Context, r *Replica, path string) []json.RawMessage {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url.String()+path, nil)
	if err != nil {
		return nil
	}
	resp, err := rt.transport.RoundTrip(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, maxModelsBody)).Decode(&list) != nil {
		return nil
	}
	if list.Data == nil {
		list.Data = []json.RawMessage{}
	}
	return list.Data
}
