package admin

import (
	_ "embed"
	"html/template"
	"log/slog"
	"net/http"

	"github.com/hopgate/hopgate/internal/pagekit"
	"github.com/hopgate/hopgate/telemetry"
)

//go:embed pages.html
var pagesHTML string

//go:embed pages.css
var pagesCSS string

var (
	assets = pagekit.New(pagesCSS)
	pages  = template.Must(template.New("pages").Funcs(template.FuncMap{
		"ring": describeRing,
	}).Parse(pagesHTML))
)

// pageData is what every admin page template gets: its view plus the
// embedded style and script.
type pageData struct {
	Title string
	View  any
	CSS   template.CSS
	JS    template.JS
	// Refresh is the live view's period in seconds (0: static page).
	Refresh int
}

func (s *Server) render(w http.ResponseWriter, status int, name, title string, refresh int, view any) {
	assets.SetHeaders(w)
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, pageData{Title: title, View: view, CSS: assets.CSS, JS: assets.JS, Refresh: refresh}); err != nil {
		slog.Warn("admin page", slog.String("page", name), slog.Any("error", err))
	}
}

// oncallPage serves /admin, the on-call page.
func (s *Server) oncallPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "oncall", "hopgate on-call", 5, s.oncall())
}

// traceListPage serves /admin/traces?model=&channel=&outcome=.
func (s *Server) traceListPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := telemetry.TraceFilter{Model: q.Get("model"), Channel: q.Get("channel"), Outcome: q.Get("outcome")}
	s.render(w, http.StatusOK, "traces", "hopgate traces", 10, s.traceList(f))
}

// tracePage serves /admin/traces/{trace_id}: the waterfall, or a 404 page
// that says why a trace may be missing.
func (s *Server) tracePage(w http.ResponseWriter, r *http.Request) {
	v := s.traceView(r.PathValue("trace_id"))
	if v.NotFound {
		s.render(w, http.StatusNotFound, "notfound", "trace not found", 0, v)
		return
	}
	s.render(w, http.StatusOK, "trace", "trace "+v.ID, 0, v)
}
