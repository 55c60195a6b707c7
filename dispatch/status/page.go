package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/pagekit"
)

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS string

var (
	assets = pagekit.New(pageCSS)
	page   = template.Must(template.New("status").Funcs(template.FuncMap{
		"pct":   pct,
		"title": windowTitle,
		"x":     func(i int) int { return i * barStep },
		"dict":  dict,
	}).Parse(pageHTML))
)

// barStep is the distance between bars in the SVG's viewBox units (a
// bar is 8 wide).
const barStep = 10

// cacheFor bounds how often a public page reaches the store: every hit
// within it is served from the last view.
const cacheFor = 5 * time.Second

// Options configure a Service.
type Options struct {
	Store      Store                 // nil: NewMemoryStore()
	Clock      clockwork.Clock       // dates the counts; nil: the real clock
	FlushClock clockwork.Clock       // paces the flushes; nil: the real clock
	Config     func() *config.Config // the configuration in force (models, status.enabled)
	Logger     *slog.Logger          // nil: slog.Default()
	FlushEvery time.Duration         // 0: DefaultFlushEvery
}

// Service is the status page: the recorder, its store and the handlers.
type Service struct {
	store  Store
	clock  clockwork.Clock
	config func() *config.Config
	log    *slog.Logger
	rec    *Recorder

	mu       sync.Mutex
	cached   *View
	cachedAt time.Time
	cacheKey string
}

// New returns a Service; start its flusher with Run.
func New(o Options) *Service {
	if o.Store == nil {
		o.Store = NewMemoryStore()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{store: o.Store, clock: o.Clock, config: o.Config, log: o.Logger,
		rec: NewRecorder(o.Store, o.Clock, o.FlushClock, o.FlushEvery, o.Logger)}
}

// Enabled reports status.enabled of the config in force.
func (s *Service) Enabled() bool { return s != nil && s.config().Status.Enabled }

// Record counts one finished request (see Classify). A nil Service, or a
// disabled page, records nothing.
func (s *Service) Record(model, outcome string) {
	if s.Enabled() {
		s.rec.Record(model, outcome)
	}
}

// Run flushes counts to the store until ctx ends (then once more).
func (s *Service) Run(ctx context.Context) { s.rec.Run(ctx) }

// Flush writes what was counted to the store now.
func (s *Service) Flush(ctx context.Context) error { return s.rec.Flush(ctx) }

// Recorder is the service's recorder.
func (s *Service) Recorder() *Recorder { return s.rec }

// View returns the page's data, at most cacheFor old.
func (s *Service) View(ctx context.Context) (*View, error) {
	cfg := s.config()
	key := ""
	models := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		models = append(models, m.Name)
		key += m.Name + "\x00"
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && key == s.cacheKey && now.Sub(s.cachedAt) < cacheFor && !now.Before(s.cachedAt) {
		return s.cached, nil
	}
	v, err := buildView(ctx, s.store, s.rec, now, models)
	if err != nil {
		return nil, err
	}
	s.cached, s.cachedAt, s.cacheKey = v, now, key
	return v, nil
}

// ServeHTML serves /status.
func (s *Service) ServeHTML(w http.ResponseWriter, r *http.Request) {
	v, ok := s.view(w, r)
	if !ok {
		return
	}
	assets.SetHeaders(w)
	// The page is public: a CDN or a browser may keep it briefly.
	w.Header().Set("Cache-Control", "public, max-age=5")
	if err := page.Execute(w, struct {
		*View
		CSS template.CSS
		JS  template.JS
	}{v, assets.CSS, assets.JS}); err != nil {
		s.log.Warn("status page", slog.Any("error", err))
	}
}

// ServeJSON serves /status.json.
func (s *Service) ServeJSON(w http.ResponseWriter, r *http.Request) {
	v, ok := s.view(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=5")
	w.Header().Set("Access-Control-Allow-Origin", "*") // public data, for other status aggregators
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Service) view(w http.ResponseWriter, r *http.Request) (*View, bool) {
	v, err := s.View(r.Context())
	if err != nil {
		s.log.Warn("status: store read failed", slog.Any("error", err))
		http.Error(w, "status history unavailable", http.StatusServiceUnavailable)
		return nil, false
	}
	return v, true
}

// dict builds the argument map of a sub-template from key, value pairs.
func dict(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func pct(r *float64) string {
	if r == nil {
		return "no requests"
	}
	return fmt.Sprintf("%.2f %%", *r*100)
}

// windowTitle is a bar's tooltip, e.g. "12:04 UTC: 97.30 % of 150
// requests served".
func windowTitle(w Window, layout string) string {
	when := w.Start.UTC().Format(layout)
	if w.SuccessRate == nil {
		return when + ": no requests"
	}
	return fmt.Sprintf("%s: %s of %d requests served (%d failed)", when, pct(w.SuccessRate), w.OK+w.Failed, w.Failed)
}
