package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
)

// modelByID answers GET /v1/models/{id} (openai-go's models.retrieve, the
// Anthropic SDK's Models.Get): the model object in the shape of the
// client (Anthropic's when it sends anthropic-version), or 404
// model_not_found in its dialect (DESIGN.md §14). A model id may hold "/"
// ("org/model"): everything after /v1/models/ is the id.
func (s *Server) modelByID(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.fail(w, r, apierror.MethodNotAllowed(r.Method))
		return
	}
	if _, aerr := s.identify(cfg, r); aerr != nil {
		s.fail(w, r, aerr)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	m := cfg.Model(id)
	anthropic := r.Header.Get("Anthropic-Version") != ""
	if m == nil || anthropic && !serves(m, "chat") {
		s.fail(w, r, apierror.ModelNotFound("model \""+id+"\" does not exist on this gateway; GET /v1/models lists the models served"))
		return
	}
	var out any
	if anthropic {
		out = struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}{"model", m.Name, m.Name, "1970-01-01T00:00:00Z"}
	} else {
		out = struct {
			ID         string   `json:"id"`
			Object     string   `json:"object"`
			Created    int64    `json:"created"`
			OwnedBy    string   `json:"owned_by"`
			Operations []string `json:"hopgate_operations"`
		}{m.Name, "model", 0, "hopgate", operations(m)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", dispatch.RequestID(r.Context()))
	_ = json.NewEncoder(w).Encode(out)
}
