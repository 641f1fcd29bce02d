// Package dashboard serves precog's web pages over a ledger: the runs with
// live progress, one run's shard timeline, throughput and errors with
// Cancel and Retry buttons, and the scheduled jobs with their staleness.
// Everything (templates, CSS, the small script, the SVG charts drawn in Go)
// is embedded in the binary: no CDN, no Node build step.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Source hands a request the ledger to read. The Postgres ledger is shared
// by every request; the embedded one admits one process, so it is opened
// per request and released at once (see BoltDir).
type Source interface {
	// Ledger returns the ledger and a function to call when the request is
	// done with it. ledger.ErrBusy means another process holds it.
	Ledger(ctx context.Context) (ledger.Store, func(), error)
	// Where names the ledger in pages (never a URL with a password).
	Where() string
}

// Shared is a Source over one open ledger (the Postgres ledger, or the
// embedded ledger of the run this process executes).
type Shared struct {
	L    ledger.Store
	Name string
}

// Ledger implements Source.
func (s Shared) Ledger(context.Context) (ledger.Store, func(), error) { return s.L, func() {}, nil }

// Where implements Source.
func (s Shared) Where() string { return s.Name }

// BoltDir is a Source over the embedded ledger under a state directory,
// opened for each request. Processes share the file transaction by
// transaction; one frozen inside a transaction (or an older precog holding
// the file for its whole run) makes pages say the ledger is busy after
// busyWait instead of hanging for bolt.LockWait.
type BoltDir struct{ StateDir string }

// busyWait bounds a page's wait for another process's ledger transaction,
// which lasts milliseconds unless that process is frozen.
const busyWait = time.Second

// Ledger implements Source.
func (b BoltDir) Ledger(ctx context.Context) (ledger.Store, func(), error) {
	l, err := open.Open(ctx, open.Location{StateDir: b.StateDir}, open.Options{Wait: busyWait})
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

// Where implements Source.
func (b BoltDir) Where() string { return "the embedded ledger in " + b.StateDir }

// Actions are the run actions behind the Cancel and Retry buttons; the
// command wires them to the same code as `precog cancel` and `precog retry`.
// A nil func hides its button. Each returns a message for people.
type Actions struct {
	Cancel func(ctx context.Context, runID string) (string, error)
	Retry  func(ctx context.Context, runID string) (string, error)
}

// Options configure a dashboard.
type Options struct {
	Source  Source
	Actions Actions
	// BackfillActions are a backfill page's buttons (backfillpage.go).
	BackfillActions BackfillActions
	// Tokens are the accepted bearer tokens (PRECOG_API_TOKENS,
	// --tokens-file). Empty is refused unless InsecureNoAuth.
	Tokens         []string
	InsecureNoAuth bool
	// StateDir is the embedded ledger's state directory when the source is
	// one: a run there whose process is gone is shown interrupted, with the
	// command that resumes it, as precog status shows it ("": the Postgres
	// ledger, whose workers' leases say who works on a run).
	StateDir string
	// JobsDir is a directory of job specs for /jobs ("" hides schedules).
	JobsDir string
	// Poll is how often pages refresh their live parts (default 1.5s).
	Poll   time.Duration
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// BusySnapshot, when set, returns what the process holding a busy
	// embedded ledger last wrote of its runs (precog backfill writes one);
	// the busy page lists them, saying whose snapshot it is and how old.
	BusySnapshot func() (BusySnapshot, bool)
}

// BusySnapshot is a running process's own view of the embedded ledger it
// holds: its newest runs as status shows them.
type BusySnapshot struct {
	PID       int
	WrittenAt time.Time
	Runs      []runview.Run
}

// ErrNoTokens: no token configured and InsecureNoAuth not set.
var ErrNoTokens = errors.New("dashboard: no tokens (set PRECOG_API_TOKENS or --tokens-file), or pass --insecure-no-auth to serve without authentication")

// Server is the dashboard's HTTP handler.
type Server struct {
	opts Options
	auth *auth
	tmpl *template.Template
	mux  *http.ServeMux
}

// New checks the options and builds the handler.
func New(o Options) (*Server, error) {
	if o.Source == nil {
		return nil, errors.New("dashboard: no ledger source")
	}
	if len(o.Tokens) == 0 && !o.InsecureNoAuth {
		return nil, ErrNoTokens
	}
	if o.Poll <= 0 {
		o.Poll = 1500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a, err := newAuth(o.Tokens, o.InsecureNoAuth)
	if err != nil {
		return nil, err
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	s := &Server{opts: o, auth: a, tmpl: t, mux: http.NewServeMux()}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.Handle("GET /{$}", s.auth.page(s.runsPage))
	s.mux.Handle("GET /runs/{id}", s.auth.page(s.runPage))
	s.mux.Handle("GET /jobs", s.auth.page(s.jobsPage))
	s.mux.Handle("GET /workers", s.auth.page(s.workersPage))
	s.mux.Handle("GET /runs/{id}/rejects", s.auth.page(s.rejectsPage))
	s.mux.Handle("GET /api/runs", s.auth.api(s.apiRuns))
	s.mux.Handle("GET /api/runs/{id}", s.auth.api(s.apiRun))
	s.mux.Handle("POST /runs/{id}/cancel", s.auth.action(s.cancel))
	s.mux.Handle("POST /runs/{id}/retry", s.auth.action(s.retry))
	s.backfillRoutes()
}

// healthz answers 200 while the process serves (a liveness probe): no
// authentication, no ledger read.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyTimeout bounds /readyz's ledger read.
const readyTimeout = 3 * time.Second

// readyz answers 200 when the ledger answers a read within readyTimeout
// (a readiness probe: a dashboard that cannot reach its ledger gets no
// traffic), else 503 with the reason; an embedded ledger held by a run
// is ready (the pages say it is busy). No authentication, no run data.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	err := func() error {
		led, release, err := s.opts.Source.Ledger(ctx)
		if err != nil {
			return err
		}
		defer release()
		_, err = led.Runs(ctx, "", 1)
		return err
	}()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil && !errors.Is(err, ledger.ErrBusy) {
		s.opts.Logger.Warn("dashboard: not ready", "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "ledger: unavailable")
		return
	}
	fmt.Fprintln(w, "ok")
}

// ServeHTTP implements http.Handler with security headers on every answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

// ListenAndServe serves on addr until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// viewFunc is how a page views a run with its shards at now.
type viewFunc func(r jobs.Run, shards []jobs.Shard, now time.Time) runview.Run

// view is the run's view as precog status shows it: a run of the embedded
// ledger whose process is gone is interrupted, not running.
func (s *Server) view(r jobs.Run, shards []jobs.Shard, now time.Time) runview.Run {
	v := runview.FromAt(r, shards, now)
	if s.opts.StateDir == "" {
		return v
	}
	return runner.LocalView(s.opts.StateDir, r, shards, v, now)
}
