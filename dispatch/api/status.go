package api

import (
	"net/http"

	"github.com/hopgate/hopgate/dispatch/status"
)

// SetStatus attaches the public status page (DESIGN.md §10): /status and
// /status.json are served without a key, and every proxied request is
// counted. Call it before Handler. Without it, or with status.enabled
// false, both paths answer like any unknown route.
func (s *Server) SetStatus(st *status.Service) { s.status = st }

// routeStatus adds the status routes to mux. They are not wrapped by
// ServerHandler: a page view is not a request worth a trace.
func (s *Server) routeStatus(mux *http.ServeMux, notFound http.Handler) {
	page := func(serve func(http.ResponseWriter, *http.Request)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.status.Enabled() {
				notFound.ServeHTTP(w, r)
				return
			}
			serve(w, r)
		})
	}
	if s.status == nil {
		return
	}
	mux.Handle("GET /status", page(s.status.ServeHTML))
	mux.Handle("GET /status.json", page(s.status.ServeJSON))
}
