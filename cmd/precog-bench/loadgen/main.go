// Command loadgen is the benchmark harness's load generator: it runs in its
// own process so that its CPU use is not counted against the server it
// measures, drives a fixed number of concurrent connections (closed loop,
// or paced to a total rate), and prints one JSON line with the request count,
// QPS and latency percentiles.
//
//	loadgen -mode get      -url http://127.0.0.1:8080 -ns recs -keys 1000000 -conc 64 -duration 3s
//	loadgen -mode batchget -url … -ns recs -keys 1000000 -batch 100
//	loadgen -mode predict  -url … -ns recs -dim 16
//	loadgen -mode redis    -redis 127.0.0.1:6379 -prefix recs:v1: -keys 1000000
//
// HTTP modes use a lean keep-alive HTTP/1.1 client (-client lean, one
// connection per worker, no pipelining; see httpConn) so that the
// generator's own CPU, which shares the machine with the server, is about
// what the raw mode's go-redis client costs; -client net/http compares.
//
// Latency is measured from the moment a request is sent (closed loop) or
// was due (paced), so a server that falls behind a paced rate shows it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Result is the JSON line loadgen prints.
type Result struct {
	Mode     string  `json:"mode"`
	Conc     int     `json:"conc"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	QPS      float64 `json:"qps"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	// FirstError shows what went wrong when Errors > 0.
	FirstError string `json:"first_error,omitempty"`
}

type options struct {
	mode, url, ns, token, redisAddr, prefix string
	keys                                    int
	conc, batch, dim                        int
	duration                                time.Duration
	rate                                    float64
	client                                  string
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "get", "get | batchget | predict | redis")
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8080", "lookup API base URL")
	flag.StringVar(&o.ns, "ns", "", "namespace")
	flag.StringVar(&o.token, "token", "", "bearer token")
	flag.StringVar(&o.redisAddr, "redis", "", "redis address (mode redis)")
	flag.StringVar(&o.prefix, "prefix", "", "redis key prefix (mode redis), e.g. recs:VERSION:")
	flag.IntVar(&o.keys, "keys", 1000, "keys are 0…keys-1, picked uniformly")
	flag.IntVar(&o.conc, "conc", 64, "concurrent connections")
	flag.IntVar(&o.batch, "batch", 100, "keys per batchGet")
	flag.IntVar(&o.dim, "dim", 16, "features per live prediction")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "measurement time (after a 0.5 s warm-up)")
	flag.Float64Var(&o.rate, "rate", 0, "total requests/s across connections (0: as fast as possible)")
	flag.StringVar(&o.client, "client", "lean", "HTTP client: lean (a minimal keep-alive HTTP/1.1 client, like wrk) or net/http")
	flag.Parse()
	res, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

// requester sends one HTTP request on a worker's connection and returns the
// status and body (valid until its next call).
type requester interface {
	do(method, path string, body []byte) (int, []byte, error)
	close()
}

// stdConn is net/http's client, for comparison with the lean one.
type stdConn struct {
	base, auth string
	client     *http.Client
	buf        bytes.Buffer
}

var stdClient *http.Client

func newStdConn(base, auth string, conc int) *stdConn {
	if stdClient == nil {
		tr := &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, IdleConnTimeout: time.Minute}
		stdClient = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	return &stdConn{base: base, auth: auth, client: stdClient}
}

func (c *stdConn) do(method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	c.buf.Reset()
	_, err = c.buf.ReadFrom(resp.Body)
	return resp.StatusCode, c.buf.Bytes(), err
}

func (c *stdConn) close() { c.client.CloseIdleConnections() }

// doer sends one request for worker w with worker-local randomness.
type doer func(w int, r *rand.Rand) error

func run(o options) (Result, error) {
	if o.conc < 1 || o.keys < 1 || o.duration <= 0 {
		return Result{}, fmt.Errorf("-conc, -keys and -duration must be positive")
	}
	do, closeFn, err := newDoer(o)
	if err != nil {
		return Result{}, err
	}
	defer closeFn()
	warm := 500 * time.Millisecond
	start := time.Now()
	measureFrom := start.Add(warm)
	end := measureFrom.Add(o.duration)
	var (
		mu    sync.Mutex
		lats  []time.Duration
		errs  int
		first string
		wg    sync.WaitGroup
	)
	for w := 0; w < o.conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var local []time.Duration
			var lerr int
			var lfirst string
			var interval time.Duration
			next := start.Add(time.Duration(r.Int64N(int64(time.Millisecond))))
			if o.rate > 0 {
				interval = time.Duration(float64(time.Second) * float64(o.conc) / o.rate)
				next = start.Add(time.Duration(r.Int64N(int64(interval))))
			}
			for {
				t0 := time.Now()
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					t0 = next
					next = next.Add(interval)
				}
				if t0.After(end) {
					break
				}
				err := do(w, r)
				lat := time.Since(t0)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					lerr++
					if lfirst == "" {
						lfirst = err.Error()
					}
					continue
				}
				local = append(local, lat)
			}
			mu.Lock()
			lats = append(lats, local...)
			errs += lerr
			if first == "" {
				first = lfirst
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lats)
	res := Result{Mode: o.mode, Conc: o.conc, Requests: len(lats), Errors: errs, Seconds: o.duration.Seconds(), FirstError: first}
	res.QPS = float64(len(lats)) / o.duration.Seconds()
	if len(lats) > 0 {
		res.P50us = float64(lats[len(lats)*50/100]) / 1e3
		res.P99us = float64(lats[min(len(lats)-1, len(lats)*99/100)]) / 1e3
	}
	return res, nil
}

func newDoer(o options) (doer, func(), error) {
	if o.mode == "redis" {
		c := goredis.NewClient(&goredis.Options{Addr: o.redisAddr, PoolSize: o.conc, MinIdleConns: o.conc})
		ctx := context.Background()
		return func(_ int, r *rand.Rand) error {
			return c.Get(ctx, o.prefix+strconv.Itoa(r.IntN(o.keys))).Err()
		}, func() { c.Close() }, nil
	}
	u, err := url.Parse(strings.TrimRight(o.url, "/"))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, nil, fmt.Errorf("-url %q: want http://host:port", o.url)
	}
	base := u.Path + "/v1/predictions/" + o.ns
	auth := ""
	if o.token != "" {
		auth = "Bearer " + o.token
	}
	// One keep-alive connection per worker, like a connection pool of
	// o.conc; conns[w] is only ever used by worker w.
	conns := make([]requester, o.conc)
	for i := range conns {
		switch o.client {
		case "lean":
			conns[i] = &httpConn{addr: u.Host, auth: auth}
		case "net/http":
			conns[i] = newStdConn(u.Scheme+"://"+u.Host, auth, o.conc)
		default:
			return nil, nil, fmt.Errorf("-client %q: want lean or net/http", o.client)
		}
	}
	// send makes one request; check, when set, vets a 200 response's body.
	send := func(w int, method, path string, body []byte, check func([]byte) error) error {
		status, b, err := conns[w].do(method, path, body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		if status != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s: %.200s", method, path, status, http.StatusText(status), b)
		}
		if check != nil {
			return check(b)
		}
		return nil
	}
	done := func() {
		for _, c := range conns {
			c.close()
		}
	}
	switch o.mode {
	case "get":
		return func(w int, r *rand.Rand) error {
			return send(w, http.MethodGet, base+"/"+strconv.Itoa(r.IntN(o.keys)), nil, nil)
		}, done, nil
	case "batchget":
		return func(w int, r *rand.Rand) error {
			var b strings.Builder
			b.WriteString(`{"keys":[`)
			for i := 0; i < o.batch; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `"%d"`, r.IntN(o.keys))
			}
			b.WriteString("]}")
			return send(w, http.MethodPost, base+":batchGet", []byte(b.String()), func(body []byte) error {
				// Every key exists: a miss is a store step that failed.
				if n := bytes.Count(body, []byte(`"found":false`)); n > 0 {
					return fmt.Errorf("batchGet: %d of %d stored keys answered as misses", n, o.batch)
				}
				return nil
			})
		}, done, nil
	case "predict":
		return func(w int, r *rand.Rand) error {
			var b strings.Builder
			// Keys outside the stored range miss every store: live inference.
			fmt.Fprintf(&b, `{"key":"%d","inputs":{"features":[`, 1_000_000_000_000+r.Int64N(1<<40))
			for i := 0; i < o.dim; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strconv.FormatFloat(2*r.Float64()-1, 'f', 4, 32))
			}
			b.WriteString("]}}")
			return send(w, http.MethodPost, base+":predict", []byte(b.String()), func(body []byte) error {
				if !bytes.Contains(body, []byte(`"source":"live"`)) {
					return fmt.Errorf("predict: not a live answer: %.200s", body)
				}
				return nil
			})
		}, done, nil
	}
	return nil, nil, fmt.Errorf("-mode %q: want get, batchget, predict or redis", o.mode)
}
