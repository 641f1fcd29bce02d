package lookup

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup/client"
	"github.com/precog-ml/precog/sinks"
)

// Config configures the lookup API server. Zero values take the defaults
// documented on each field.
type Config struct {
	// Addr is the listen address for ListenAndServe, e.g. ":8080".
	Addr string
	// JobsDir holds the job specs (*.yaml, *.yml) whose namespaces are
	// served. An invalid spec makes New fail naming the file and field.
	JobsDir string
	// Specs are already-loaded job specs, served in addition to JobsDir.
	Specs []*jobs.Spec
	// Params are optional run parameters for the specs of JobsDir (see
	// LoadServingSpec): serving needs none.
	Params map[string]string

	// Tokens are the accepted bearer tokens (see TokensFromEnv, ReadTokensFile).
	Tokens []string
	// InsecureNoAuth serves without authentication; New refuses to start
	// without tokens unless it is set.
	InsecureNoAuth bool

	// MaxBodyBytes bounds a request body. Default 1 MiB.
	MaxBodyBytes int64
	// MaxKeysPerBatch bounds the keys of one batchGet. Default
	// DefaultMaxKeysPerBatch.
	MaxKeysPerBatch int
	// MaxKeyLen bounds a key in bytes. Default sinks.MaxKeyBytes, the
	// longest key a sink stores.
	MaxKeyLen int
	// RequestTimeout bounds one request end to end. Default 2s.
	RequestTimeout time.Duration
	// StoreTimeout bounds each step of the fallback chain (one Redis or
	// Postgres round trip): past it the request falls through to the next
	// store. Default 100ms.
	StoreTimeout time.Duration
	// ColdStartTimeout bounds a store's first, metadata queries (the type
	// of a Postgres table's key column), which run once, off the request
	// path: on a loaded machine right after start they may take longer
	// than StoreTimeout, and that is no store failure. Requests wait for
	// them within RequestTimeout. Default 10s.
	ColdStartTimeout time.Duration
	// MaxInFlight caps concurrent API requests; excess is shed with 429.
	// Default 1024.
	MaxInFlight int
	// LiveBatchSize is the most rows one live inference runs. Default 64.
	LiveBatchSize int
	// LiveBatchWait is the most the first live request of a batch waits for
	// others to join. The wait adapts below it: zero while requests come
	// one at a time, doubling towards LiveBatchWait while they queue up
	// (model.WithAdaptiveWait). Default 500µs.
	LiveBatchWait time.Duration
	// VersionPoll is the safety-net poll of {namespace}:current behind the
	// pub/sub notice. Default 1s.
	VersionPoll time.Duration
	// DrainTimeout bounds graceful shutdown in ListenAndServe. Default 10s.
	DrainTimeout time.Duration
	// RedisPoolSize is connections per Redis server. Default 128.
	RedisPoolSize int
	// PostgresMaxConns is connections per Postgres DSN. Default 16.
	PostgresMaxConns int32

	// Logger receives access and operational logs. Default slog.Default().
	Logger *slog.Logger
	// AccessLog logs one line per API request at Info (else Debug).
	AccessLog bool

	// LoadModel loads a job's model for live inference. Default: runner/model.
	LoadModel func(spec *jobs.Spec) (LiveModel, error)
}

// DefaultMaxKeysPerBatch is the default batchGet limit, shared with the Go
// client, which splits larger requests by the same number.
const DefaultMaxKeysPerBatch = client.DefaultMaxBatchKeys

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxKeysPerBatch <= 0 {
		c.MaxKeysPerBatch = DefaultMaxKeysPerBatch
	}
	if c.MaxKeyLen <= 0 {
		c.MaxKeyLen = sinks.MaxKeyBytes
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 100 * time.Millisecond
	}
	if c.ColdStartTimeout <= 0 {
		c.ColdStartTimeout = 10 * time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1024
	}
	if c.LiveBatchSize <= 0 {
		c.LiveBatchSize = 64
	}
	if c.LiveBatchWait <= 0 {
		c.LiveBatchWait = 500 * time.Microsecond
	}
	if c.VersionPoll <= 0 {
		c.VersionPoll = time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.RedisPoolSize <= 0 {
		c.RedisPoolSize = 128
	}
	if c.PostgresMaxConns <= 0 {
		c.PostgresMaxConns = 16
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// TokensFromEnv reads PRECOG_API_TOKENS (comma-separated; blanks ignored).
func TokensFromEnv() []string {
	return splitTokens(os.Getenv("PRECOG_API_TOKENS"), ",")
}

// LoadTokens are the tokens of PRECOG_API_TOKENS and, when file is not
// "", of ReadTokensFile(file): what precog serve and precog dashboard
// accept.
func LoadTokens(file string) ([]string, error) {
	tokens := TokensFromEnv()
	if file == "" {
		return tokens, nil
	}
	more, err := ReadTokensFile(file)
	if err != nil {
		return nil, err
	}
	return append(tokens, more...), nil
}

// ReadTokensFile reads one token per line (blank lines and # comments
// ignored), for --tokens-file.
func ReadTokensFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tokens file %s: no tokens", path)
	}
	return out, nil
}

func splitTokens(s, sep string) []string {
	var out []string
	for _, t := range strings.Split(s, sep) {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
