// Package client is the Go client of precog's lookup API (`precog serve`):
// precomputed predictions by key, in batches, and live predictions from
// inputs. It has no dependencies beyond the standard library.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotFound matches (errors.Is) the error of a key no store holds and no
// live inference could answer.
var ErrNotFound = errors.New("prediction not found")

// Error is a non-2xx answer of the API.
type Error struct {
	// Status is the HTTP status code: 400 bad request, 401 bad token, 404
	// unknown key or namespace, 413 body too large, 429 shed, 5xx server.
	Status int
	// Message is the server's explanation.
	Message string
	// RetryAfter is the server's Retry-After (429, 503), 0 when absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("precog lookup: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes a 404 match ErrNotFound.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// Temporary reports whether retrying later may succeed (429, 502-504).
func (e *Error) Temporary() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Prediction is one answered key.
type Prediction struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	// Values holds the record's fields (one per model output), as JSON so the
	// caller decodes them into its own types.
	Values       map[string]json.RawMessage `json:"values"`
	ModelVersion string                     `json:"model_version"`
	ComputedAt   string                     `json:"computed_at"`
	// Source is "redis", "postgres" or "live".
	Source string `json:"source"`
	// Stale reports a record older than its job's max_staleness: from
	// the X-Precog-Stale-Age header for Get and Predict, from the result's
	// "stale" for BatchGet. StaleAge is that header's age (Get, Predict).
	Stale    bool          `json:"stale"`
	StaleAge time.Duration `json:"-"`
	// AgeSeconds is a found BatchGet result's age from computed_at, as the
	// server measured it (0 elsewhere: see Age).
	AgeSeconds float64 `json:"age_seconds"`
}

// StaleAgeHeader is the response header in which the server gives the age
// in seconds of a record older than its job's max_staleness.
const StaleAgeHeader = "X-Precog-Stale-Age"

// Age is how old the prediction is at now, from its computed_at; 0 when it
// has none that parses.
func (p *Prediction) Age(now time.Time) time.Duration {
	t, err := time.Parse(time.RFC3339Nano, p.ComputedAt)
	if err != nil {
		return 0
	}
	return now.Sub(t)
}

// fromHeader reads what a single-key response says in headers.
func (p *Prediction) fromHeader(h http.Header) {
	if v := h.Get(StaleAgeHeader); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
			p.Stale, p.StaleAge = true, time.Duration(secs)*time.Second
		}
	}
}

// Value decodes field name into v.
func (p *Prediction) Value(name string, v any) error {
	raw, ok := p.Values[name]
	if !ok {
		return fmt.Errorf("precog lookup: key %q has no field %q", p.Key, name)
	}
	return json.Unmarshal(raw, v)
}

// Result is one key of a BatchGet: Found false marks a miss or an
// unavailable key.
type Result struct {
	Prediction
	Found bool `json:"found"`
	// Status is "found", "miss" (no store holds the key), "unavailable"
	// (a store that may hold it failed; Error says why, and a later
	// retry may find it) or "error" (the key alone was refused, e.g.
	// empty; Error says why).
	Status string `json:"status"`
	Error  string `json:"error"`
}

// Per-key statuses of a BatchGet Result.
const (
	StatusFound       = "found"
	StatusMiss        = "miss"
	StatusUnavailable = "unavailable"
	StatusError       = "error"
)

// Unavailable reports whether the server could not tell whether the key
// exists (a store failed): unlike a miss, retrying may find it.
func (r *Result) Unavailable() bool { return r.Status == StatusUnavailable }

// DefaultMaxBatchKeys is the most keys the server takes in one batchGet
// by default (its --max-batch-keys); BatchGet splits larger requests.
const DefaultMaxBatchKeys = 1000

// DefaultParallelism bounds the parts of one split BatchGet in flight.
const DefaultParallelism = 4

// Client talks to one lookup API server. It is safe for concurrent use.
type Client struct {
	base        string
	token       string
	hc          *http.Client
	maxKeys     int
	parallelism int
	retry       *RetryPolicy
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc (its transport, timeout) for every call.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds every call (default 5s); a context deadline, when
// shorter, wins.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		hc := *c.hc
		hc.Timeout = d
		c.hc = &hc
	}
}

// WithMaxBatchKeys sets the most keys one batchGet request carries (the
// server's --max-batch-keys; default DefaultMaxBatchKeys). BatchGet splits
// larger key lists into parts of at most n keys.
func WithMaxBatchKeys(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxKeys = n
		}
	}
}

// WithParallelism bounds the parts of a split BatchGet sent at once
// (default DefaultParallelism).
func WithParallelism(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.parallelism = n
		}
	}
}

// RetryPolicy retries requests the server shed (429) or could not answer
// (503): every call of this API is a read, so a retry is always safe.
type RetryPolicy struct {
	// Attempts is the most tries of one request, the first included
	// (default 4).
	Attempts int
	// BaseDelay is the wait before the first retry, doubled before each
	// next one up to MaxDelay, with full jitter (default 100ms, 5s). A
	// Retry-After header, when longer, is waited instead.
	BaseDelay, MaxDelay time.Duration
}

// WithRetry retries 429 and 503 answers with exponential backoff and
// jitter, honouring the server's Retry-After, within the call's context.
func WithRetry(p RetryPolicy) Option {
	if p.Attempts <= 0 {
		p.Attempts = 4
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 100 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 5 * time.Second
	}
	return func(c *Client) { c.retry = &p }
}

// New returns a client of the server at baseURL (e.g. "http://precog:8080")
// sending token as a bearer token ("" for a server run with
// --insecure-no-auth).
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: &http.Client{Timeout: 5 * time.Second},
		maxKeys: DefaultMaxBatchKeys, parallelism: DefaultParallelism}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Get returns the prediction of key in namespace: precomputed (Redis, then
// Postgres) or computed live from the job's features table.
func (c *Client) Get(ctx context.Context, namespace, key string) (*Prediction, error) {
	var p Prediction
	path := "/v1/predictions/" + url.PathEscape(namespace) + "/" + url.PathEscape(key)
	if err := c.call(ctx, http.MethodGet, path, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// BatchGet returns one result per key, in order; misses and unavailable
// keys have Found false (see Result.Status). A list longer than the
// server's limit (WithMaxBatchKeys) is split into parts sent in parallel
// (WithParallelism) and reassembled in order; the first part that fails
// fails the call and cancels the others.
func (c *Client) BatchGet(ctx context.Context, namespace string, keys []string) ([]Result, error) {
	out := make([]Result, len(keys))
	if len(keys) <= c.maxKeys {
		return out, c.batchPart(ctx, namespace, keys, out)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, c.parallelism)
	errs := make(chan error, (len(keys)+c.maxKeys-1)/c.maxKeys)
	var wg sync.WaitGroup
	for lo := 0; lo < len(keys); lo += c.maxKeys {
		hi := min(lo+c.maxKeys, len(keys))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.batchPart(ctx, namespace, keys[lo:hi], out[lo:hi]); err != nil {
				errs <- fmt.Errorf("keys %d-%d: %w", lo, hi-1, err)
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// batchPart sends one batchGet of keys into out (len(out) == len(keys)).
func (c *Client) batchPart(ctx context.Context, namespace string, keys []string, out []Result) error {
	var resp struct {
		Results []Result `json:"results"`
	}
	body := struct {
		Keys []string `json:"keys"`
	}{keys}
	if err := c.call(ctx, http.MethodPost, "/v1/predictions/"+url.PathEscape(namespace)+":batchGet", body, &resp); err != nil {
		return err
	}
	if len(resp.Results) != len(keys) {
		return fmt.Errorf("precog lookup: batchGet returned %d results for %d keys", len(resp.Results), len(keys))
	}
	copy(out, resp.Results)
	return nil
}

// Predict returns the stored prediction of key when there is one, else a
// live prediction from inputs, keyed by the job's model input names, each
// one row's values flattened.
func (c *Client) Predict(ctx context.Context, namespace, key string, inputs map[string][]float64) (*Prediction, error) {
	return c.predict(ctx, namespace, map[string]any{"key": key, "inputs": inputs})
}

// PredictColumns is Predict with inputs keyed by source column name: a
// number per scalar column, a []float64 per list column.
func (c *Client) PredictColumns(ctx context.Context, namespace, key string, columns map[string]any) (*Prediction, error) {
	return c.predict(ctx, namespace, map[string]any{"key": key, "columns": columns})
}

func (c *Client) predict(ctx context.Context, namespace string, body map[string]any) (*Prediction, error) {
	var p Prediction
	if err := c.call(ctx, http.MethodPost, "/v1/predictions/"+url.PathEscape(namespace)+":predict", body, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// call sends one request, retried per the client's RetryPolicy.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("precog lookup: encode request: %w", err)
		}
		body = b
	}
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, method, path, body, out)
		var apiErr *Error
		if c.retry == nil || attempt >= c.retry.Attempts || !errors.As(err, &apiErr) ||
			(apiErr.Status != http.StatusTooManyRequests && apiErr.Status != http.StatusServiceUnavailable) {
			return err
		}
		t := time.NewTimer(c.retry.delay(attempt, apiErr.RetryAfter))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// delay is the wait before retry number attempt (1-based): exponential
// with full jitter, or the server's Retry-After when longer.
func (p *RetryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := p.BaseDelay << min(attempt-1, 30)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	d = time.Duration(rand.Int64N(int64(d)) + 1)
	return max(d, retryAfter)
}

func (c *Client) once(ctx context.Context, method, path string, in []byte, out any) error {
	var body io.Reader
	if in != nil {
		body = bytes.NewReader(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("precog lookup: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("precog lookup: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("precog lookup: %s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &Error{Status: resp.StatusCode, Message: msg, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("precog lookup: %s %s: decode response: %w", method, path, err)
	}
	if hr, ok := out.(interface{ fromHeader(http.Header) }); ok {
		hr.fromHeader(resp.Header)
	}
	return nil
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if secs, err := strconv.Atoi(h); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
