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
	"net/http"
	"net/url"
	"strings"
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
}

// Value decodes field name into v.
func (p *Prediction) Value(name string, v any) error {
	raw, ok := p.Values[name]
	if !ok {
		return fmt.Errorf("precog lookup: key %q has no field %q", p.Key, name)
	}
	return json.Unmarshal(raw, v)
}

// Result is one key of a BatchGet: Found false marks a miss.
type Result struct {
	Prediction
	Found bool `json:"found"`
}

// Client talks to one lookup API server. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
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

// New returns a client of the server at baseURL (e.g. "http://precog:8080")
// sending token as a bearer token ("" for a server run with
// --insecure-no-auth).
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: &http.Client{Timeout: 5 * time.Second}}
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

// BatchGet returns one result per key, in order; misses have Found false.
func (c *Client) BatchGet(ctx context.Context, namespace string, keys []string) ([]Result, error) {
	var resp struct {
		Results []Result `json:"results"`
	}
	body := struct {
		Keys []string `json:"keys"`
	}{keys}
	if err := c.call(ctx, http.MethodPost, "/v1/predictions/"+url.PathEscape(namespace)+":batchGet", body, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(keys) {
		return nil, fmt.Errorf("precog lookup: batchGet returned %d results for %d keys", len(resp.Results), len(keys))
	}
	return resp.Results, nil
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

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("precog lookup: encode request: %w", err)
		}
		body = bytes.NewReader(b)
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
		return &Error{Status: resp.StatusCode, Message: msg}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("precog lookup: %s %s: decode response: %w", method, path, err)
	}
	return nil
}
