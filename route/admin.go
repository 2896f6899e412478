package route

import (
	"net/http"
	"time"

	"github.com/inferhq/infer/server"
)

// admin is the router's admin API, which the host serves behind its admin
// token:
//
//	GET  /admin/replicas                 every replica: state, load, ejections
//	POST /admin/replicas/{name}/drain    stop sending it requests; those in
//	                                     flight finish
//	POST /admin/replicas/{name}/undrain  send it requests again
//
// A replica's name is its host:port.
func (rt *Router) admin() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin/replicas", server.Methods(map[string]http.Handler{http.MethodGet: http.HandlerFunc(rt.listReplicas)}, refuseMethod))
	drain := func(on bool) http.Handler {
		return server.Methods(map[string]http.Handler{http.MethodPost: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rt.setDrained(w, r.PathValue("name"), on)
		})}, refuseMethod)
	}
	mux.Handle("/admin/replicas/{name}/drain", drain(true))
	mux.Handle("/admin/replicas/{name}/undrain", drain(false))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, "not_found", "no admin endpoint %s; see /admin/replicas", r.URL.Path))
	}))
	return mux
}

func (rt *Router) listReplicas(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	all := rt.Replicas()
	list := make([]ReplicaStatus, len(all))
	for i, r := range all {
		list[i] = r.Status(now)
	}
	server.WriteJSON(w, http.StatusOK, struct {
		Policy   Policy          `json:"policy"`
		Replicas []ReplicaStatus `json:"replicas"`
	}{rt.cfg.Policy, list})
}

func (rt *Router) setDrained(w http.ResponseWriter, name string, on bool) {
	for _, r := range rt.Replicas() {
		if r.name == name {
			if r.drained.Swap(on) != on {
				rt.log.Info("replica drained by the admin API", "replica", name, "drained", on)
			}
			r.m.ready.Set(b2f(r.eligible()))
			server.WriteJSON(w, http.StatusOK, r.Status(time.Now()))
			return
		}
	}
	writeError(w, newError(http.StatusNotFound, "no_replica", "no replica %q; GET /admin/replicas lists them", name))
}
