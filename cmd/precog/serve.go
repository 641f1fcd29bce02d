package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup"
)

func newServeCmd(g *globals) *cobra.Command {
	var (
		cfg        lookup.Config
		tokensFile string
		params     []string
	)
	cmd := &cobra.Command{
		Use:   "serve --jobs DIR [--addr :8080]",
		Short: "Serve the lookup API over the jobs' stores and models (Redis → Postgres → live inference)",
		Long: `Serve precomputed predictions over HTTP, from the same job specs the batch jobs
run, so the API and the jobs never disagree about layout or model:

  GET  /v1/predictions/{namespace}/{key}
  POST /v1/predictions/{namespace}:batchGet   {"keys":[…]}
  POST /v1/predictions/{namespace}:predict    {"key":…, "inputs":{"features":[…]}}
  GET  /healthz  /readyz  /metrics

Each request tries Redis ({namespace}:current, then the record), then the job's
Postgres view, then live inference with the job's model (request inputs, or the
spec's serving.features table); the response says which in "source". Concurrent
live misses are batched into one model run.

A publish of a new version switches reads to it at once (pub/sub on
{namespace}:published, plus a poll), and live inference reloads the job's model
when the published run used a different model version. --param is optional
unless a served field (the Redis namespace, a Postgres table, the model) uses a
run parameter: a backfill's namespace iris-bf-{{.date}} is served one date per
server (--param date=2026-11-03), and without it serve refuses to start.

Auth: Authorization: Bearer <token>, tokens from PRECOG_API_TOKENS (comma-
separated) or --tokens-file. Without tokens the server refuses to start unless
--insecure-no-auth is given. /healthz, /readyz and /metrics need no token.`,
		Example: `  PRECOG_API_TOKENS=s3cret precog serve --jobs jobs/ --addr :8080
  curl -H 'Authorization: Bearer s3cret' localhost:8080/v1/predictions/recs/user-42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.JobsDir == "" {
				return invalid(errors.New("--jobs: required (a directory of job specs)"))
			}
			// Params are optional: templates that need one only matter to
			// batch runs (lookup.LoadServingSpec).
			p, err := jobs.ParseParams(params)
			if err != nil {
				return invalid(err)
			}
			cfg.Params = p
			if cfg.Tokens, err = lookup.LoadTokens(tokensFile); err != nil {
				return invalid(fmt.Errorf("--tokens-file: %w", err))
			}
			cfg.Logger = g.log
			srv, err := lookup.New(cfg)
			if err != nil {
				return invalid(err)
			}
			defer srv.Close()
			g.log.Info("serving", "addr", cfg.Addr, "namespaces", srv.Namespaces(), "auth", !cfg.InsecureNoAuth || len(cfg.Tokens) > 0)
			return srv.ListenAndServe(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.JobsDir, "jobs", "", "directory of job specs whose namespaces are served (required)")
	f.StringVar(&cfg.Addr, "addr", ":8080", "listen address")
	f.StringArrayVar(&params, "param", nil, "optional run parameter k=v for specs whose paths use {{.k}} (repeatable; serving reads the published version, so batch-only params such as a source's date need not be given; a served field that uses one, such as a namespace per date, needs it)")
	f.StringVar(&tokensFile, "tokens-file", "", "file of bearer tokens, one per line (in addition to PRECOG_API_TOKENS)")
	f.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "serve without authentication (never in production)")
	f.BoolVar(&cfg.AccessLog, "access-log", false, "log every request at info level")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 1<<20, "largest request body")
	f.IntVar(&cfg.MaxKeysPerBatch, "max-batch-keys", lookup.DefaultMaxKeysPerBatch, "most keys in one batchGet")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", 1024, "concurrent requests before shedding with 429")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", 2*time.Second, "deadline of one request")
	f.DurationVar(&cfg.StoreTimeout, "store-timeout", 100*time.Millisecond, "deadline of one store lookup before falling through")
	f.DurationVar(&cfg.ColdStartTimeout, "cold-start-timeout", 10*time.Second, "deadline of a store's first, metadata queries after start (a Postgres key column's type); they run once, off the request path, and a slow one does not open the circuit breaker")
	f.IntVar(&cfg.LiveBatchSize, "live-batch-size", 64, "most rows in one live inference")
	f.DurationVar(&cfg.LiveBatchWait, "live-batch-wait", 500*time.Microsecond, "the most a live miss waits for others to batch with (adaptive: no wait while requests come one at a time)")
	return cmd
}
