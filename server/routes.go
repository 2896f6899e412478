package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// routes registers the host's own routes: health, readiness, metrics, and
// the 404 of every path no service serves.
func (s *Server) routes() {
	s.mux.Handle("/healthz", Only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	s.mux.Handle("/readyz", Only(http.MethodGet, http.HandlerFunc(s.handleReady)))
	s.mux.Handle("/metrics", Only(http.MethodGet, s.metrics.handler()))
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.paths) == 0 {
			WriteError(w, Errorf(http.StatusNotFound, "not_found", "no endpoint %s", r.URL.Path))
			return
		}
		WriteError(w, Errorf(http.StatusNotFound, "not_found", "no endpoint %s; see %s", r.URL.Path, strings.Join(s.paths, ", ")))
	}))
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	if s.unready.Load() > 0 {
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
		return
	}
	if err := s.unavailable(); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = Errorf(http.StatusServiceUnavailable, "unavailable", "%v", err)
		}
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": e.Code, "reason": e.Message})
		return
	}
	ready := map[string]string{"status": "ready"}
	if names := s.modelNames(); names != "" {
		ready["model"] = names
	}
	WriteJSON(w, http.StatusOK, ready)
}

// authorized serves h to bearers of the admin token, checked in constant
// time.
func (s *Server) authorized(h http.Handler) http.Handler {
	want := []byte(s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="infer admin"`)
			WriteError(w, Errorf(http.StatusUnauthorized, "unauthorized", "admin API needs Authorization: Bearer <--admin-token>"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Only serves h for method m (and HEAD for GET), and answers any other
// method 405 with Allow, in the host's error shape.
func Only(m string, h http.Handler) http.Handler {
	return Methods(map[string]http.Handler{m: h}, RefuseMethod)
}

// RefuseMethod answers 405 with msg in the host's error shape: Methods'
// refusal for the APIs of that shape.
func RefuseMethod(w http.ResponseWriter, msg string) {
	WriteError(w, Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s", msg))
}

// Methods serves each request with the handler of its method in hs (HEAD
// with GET's, unless hs has one for HEAD) and answers any other method 405
// with Allow, the refusal written by refuse with its message. It is the one
// method check of every route, whatever the shape of its API's errors.
func Methods(hs map[string]http.Handler, refuse func(w http.ResponseWriter, msg string)) http.Handler {
	methods := slices.Sorted(maps.Keys(hs))
	var allow []string
	for _, m := range methods {
		allow = append(allow, m)
		if m == http.MethodGet && hs[http.MethodHead] == nil {
			allow = append(allow, http.MethodHead)
		}
	}
	allowHeader, use := strings.Join(allow, ", "), strings.Join(methods, " or ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hs[r.Method]
		if h == nil && r.Method == http.MethodHead {
			h = hs[http.MethodGet]
		}
		if h == nil {
			w.Header().Set("Allow", allowHeader)
			refuse(w, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, use))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler's panic into a JSON 500: no stack trace
// reaches a client.
func recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				WriteError(w, Errorf(http.StatusInternalServerError, "internal", "internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}
