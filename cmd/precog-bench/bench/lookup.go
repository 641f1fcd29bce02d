package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/lookup"
	"github.com/precog-ml/precog/runner/model"
	redissink "github.com/precog-ml/precog/sinks/redis"
)

// modelOutputs maps each test model's outputs to stored fields.
var modelOutputs = map[string]map[string]string{
	"ranker": {"score": "score"},
	"heavy":  {"score": "score"},
	"recs":   {"topk_items": "items", "topk_scores": "scores"},
}

// loadResult mirrors loadgen's JSON line.
type loadResult struct {
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	QPS        float64 `json:"qps"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	FirstError string  `json:"first_error"`
	// MeanBatch is the server's mean rows per live inference run (from
	// its /metrics), for live-fallback measurements.
	MeanBatch float64 `json:"-"`
}

// liveBatches reads the live batch-size histogram of the server at url:
// rows and inference runs over the server's life (zeros if unknown).
func liveBatches(url string) (rows, runs float64) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "precog_lookup_live_batch_size_sum"):
			rows, _ = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(name, "precog_lookup_live_batch_size_count"):
			runs, _ = strconv.ParseFloat(v, 64)
		}
	}
	return rows, runs
}

// loadBatched runs the load generator against the live server at url and
// sets the result's MeanBatch: rows per inference run during that load.
func (h *harness) loadBatched(gen, url string, args ...string) (loadResult, error) {
	rows0, runs0 := liveBatches(url)
	r, err := h.load(gen, args...)
	if err != nil {
		return r, err
	}
	if rows, runs := liveBatches(url); runs > runs0 {
		r.MeanBatch = (rows - rows0) / (runs - runs0)
	}
	return r, nil
}

func (r loadResult) p50() time.Duration { return time.Duration(r.P50us * 1e3) }
func (r loadResult) p99() time.Duration { return time.Duration(r.P99us * 1e3) }

const (
	lookupNS    = "benchlookup"
	lookupToken = "bench-token"
	lookupConc  = 64
)

// lookup is issue 4's section: the API's hit path against raw Redis GETs,
// batchGet, and live inference with and without dynamic batching. The
// server runs in this process; the load comes from loadgen, a separate
// process, so the generator's CPU is not the server's.
func (h *harness) lookup(ctx context.Context) (*section, error) {
	s := &section{Title: fmt.Sprintf("Lookup API: %d concurrent connections from a separate load-generator process, ranker namespace of %d keys", lookupConc, h.cfg.rows)}
	srv, err := h.servers()
	if err != nil {
		return s, err
	}
	gen, err := h.buildLoadgen()
	if err != nil {
		return s, err
	}
	data, err := h.dataset(h.cfg.rows)
	if err != nil {
		return s, err
	}
	specPath, err := h.writeSpec("bench-lookup", "ranker", data, map[string]string{"score": "score"},
		fmt.Sprintf("  redis: { addr: %q, namespace: %s, ttl: 48h }\n", srv.redisAddr, lookupNS))
	if err != nil {
		return s, err
	}
	if _, err := h.runPrecog(ctx, specPath, filepath.Join(h.cfg.work, "state-lookup"), nil); err != nil {
		return s, err
	}
	rc := goredis.NewClient(&goredis.Options{Addr: srv.redisAddr})
	version, err := rc.Get(ctx, redissink.CurrentKey(lookupNS)).Result()
	rc.Close()
	if err != nil {
		return s, fmt.Errorf("published version of %s: %w", lookupNS, err)
	}
	spec, err := jobs.Load(specPath, nil)
	if err != nil {
		return s, err
	}
	keys := strconv.FormatInt(h.cfg.rows, 10)
	measure := h.cfg.measure.String()

	// Hit path and batchGet on a server with default settings.
	url, stop, err := startLookup(lookup.Config{Specs: []*jobs.Spec{spec}, Tokens: []string{lookupToken}})
	if err != nil {
		return s, err
	}
	common := []string{"-url", url, "-ns", lookupNS, "-token", lookupToken, "-keys", keys, "-duration", measure}
	// PRECOG_BENCH_CPUPROFILE=FILE profiles this process, i.e. the lookup
	// server, while the GET hit path runs at full load.
	stopProf := func() {}
	if f := os.Getenv("PRECOG_BENCH_CPUPROFILE"); f != "" {
		if stopProf, err = startCPUProfile(f); err != nil {
			return s, fmt.Errorf("PRECOG_BENCH_CPUPROFILE: %w", err)
		}
	}
	var raw, get loadResult
	for rep := 0; rep < 2; rep++ { // alternate, keep the best of each
		r, err := h.load(gen, "-mode", "redis", "-redis", srv.redisAddr, "-prefix", redissink.RecordKey(lookupNS, version, ""),
			"-keys", keys, "-conc", strconv.Itoa(lookupConc), "-duration", measure)
		if err != nil {
			stop()
			return s, err
		}
		if r.QPS > raw.QPS {
			raw = r
		}
		g, err := h.load(gen, append([]string{"-mode", "get", "-conc", strconv.Itoa(lookupConc)}, common...)...)
		if err != nil {
			stop()
			return s, err
		}
		if g.QPS > get.QPS {
			get = g
		}
	}
	stopProf()
	s.add(atLeast(fmt.Sprintf("GET hit QPS (p50 %s, p99 %s at full load) vs raw go-redis GET (p99 %s)", dur(get.p50()), dur(get.p99()), dur(raw.p99())),
		get.QPS, raw.QPS, "req/s", 0.6))
	half, err := h.load(gen, append([]string{"-mode", "get", "-conc", strconv.Itoa(lookupConc), "-rate", fmt.Sprint(get.QPS / 2)}, common...)...)
	if err != nil {
		stop()
		return s, err
	}
	// The same offered rate of raw GETs shows what the machine itself adds
	// to the tail (the load generator, redis-server and anything else
	// running share its cores).
	rawHalf, err := h.load(gen, "-mode", "redis", "-redis", srv.redisAddr, "-prefix", redissink.RecordKey(lookupNS, version, ""),
		"-keys", keys, "-conc", strconv.Itoa(lookupConc), "-duration", measure, "-rate", fmt.Sprint(get.QPS/2))
	if err != nil {
		stop()
		return s, err
	}
	s.add(atMost(fmt.Sprintf("GET latency at half the max load (%s offered): p99 (p50 %s) vs raw go-redis GETs at the same rate (p50 %s)", rate(get.QPS/2, "req/s"), dur(half.p50()), dur(rawHalf.p50())),
		dur(half.p99()), dur(rawHalf.p99()), float64(half.p99())/float64(rawHalf.p99()), 1.5))
	bg, err := h.load(gen, append([]string{"-mode", "batchget", "-batch", "100", "-conc", strconv.Itoa(lookupConc)}, common...)...)
	stop()
	if err != nil {
		return s, err
	}
	s.add(row{What: fmt.Sprintf("batchGet of 100 keys, %d connections: p99 (p50 %s) and keys/s", lookupConc, dur(bg.p50())),
		Ours: dur(bg.p99()) + ", " + rate(bg.QPS*100, "keys/s"), Raw: rate(raw.QPS, "GET/s") + " (raw GETs)",
		Ratio: fmt.Sprintf("%.2f", bg.QPS*100/raw.QPS), Target: "report", Verdict: "—"})

	// Live fallback: dynamic batching (defaults) vs one inference per request.
	results := []loadResult{raw, get, half, bg}
	for _, name := range strings.Split(h.cfg.live, ",") {
		live, err := h.liveFallback(gen, name, data, srv.redisAddr, common)
		if err != nil {
			return s, fmt.Errorf("live fallback, %s model: %w", name, err)
		}
		gain := live.batched.QPS / live.single.QPS
		target, ok := "report", "—"
		if name == "heavy" { // compute-bound: where batching must pay
			target, ok = "≥ 4×", verdict(gain >= 4)
		}
		s.add(row{What: fmt.Sprintf("live fallback (`:predict` on new keys, %s model), %d clients: dynamic batching (p99 %s; rows per run %.1f at %d clients, %.1f at half that rate) vs batch size 1 (p99 %s); the model's own gain, raw ORT at %d rows vs 1 row a run: %.1f×",
			name, lookupConc, dur(live.batched.p99()), live.batched.MeanBatch, lookupConc, live.half.MeanBatch, dur(live.single.p99()), live.rawBatch, live.rawORT/live.rawORT1),
			Ours: rate(live.batched.QPS, "req/s"), Raw: rate(live.single.QPS, "req/s") + " (batch 1)", Ratio: fmt.Sprintf("%.1f×", gain),
			Target: target, Verdict: ok})
		floor, what := get.QPS, "GET hits"
		if live.rawORT < floor {
			floor, what = live.rawORT, "raw ORT"
		}
		s.add(atLeast(fmt.Sprintf("live `:predict` (%s model) vs its floor: min(GET hits on the same server %s, raw ORT at the %d-row batches the batcher reached %s) = %s",
			name, rate(get.QPS, "req/s"), live.rawBatch, rate(live.rawORT, "rows/s"), what),
			live.batched.QPS, floor, "req/s", 0.7))
		// Where the server, the load generator and redis-server share a
		// few cores, a live request costs the CPU of a GET hit and its
		// row's share of a run, one after the other: the floor is the two
		// rates in series, not the smaller of them.
		serial := 1 / (1/get.QPS + 1/live.rawORT)
		s.add(row{What: fmt.Sprintf("live `:predict` (%s model) vs the floor of shared cores: GET hits and raw ORT in series, 1/(1/%s + 1/%s)",
			name, rate(get.QPS, "req/s"), rate(live.rawORT, "rows/s")),
			Ours: rate(live.batched.QPS, "req/s"), Raw: rate(serial, "req/s"), Ratio: fmt.Sprintf("%.2f", live.batched.QPS/serial),
			Target: "report", Verdict: "—"})
		results = append(results, live.batched, live.half, live.single)
	}
	wb, err := h.liveWriteback(gen, data, srv.redisAddr, common)
	if err != nil {
		return s, fmt.Errorf("live write-back: %w", err)
	}
	s.add(row{What: fmt.Sprintf("live `:predict` (ranker model, new keys, %d clients) with `serving.writeback_ttl` set, each answer also written back to Redis (p99 %s), vs the same server without write-back (p99 %s)",
		lookupConc, dur(wb.on.p99()), dur(wb.off.p99())),
		Ours: rate(wb.on.QPS, "req/s"), Raw: rate(wb.off.QPS, "req/s"), Ratio: fmt.Sprintf("%.2f", wb.on.QPS/wb.off.QPS),
		Target: "report", Verdict: "—"})
	results = append(results, wb.on, wb.off)
	for _, r := range results {
		if r.Errors > 0 {
			s.note("%d of %d requests failed in one measurement, first: %s", r.Errors, r.Requests+r.Errors, r.FirstError)
		}
	}
	s.note("lookup: server defaults (live batch ≤ 64 rows, adaptive wait of at most 500 µs and never longer than a run takes, live sessions of one non-spinning intra-op thread with two batches in flight per session), bearer-token auth on every request; the load generator, the server and redis-server share the machine's %d cores.", nprocs())
	s.note("like with like: the raw GETs and the API requests both come from loadgen, a separate process, through lean keep-alive clients (go-redis for RESP, a minimal HTTP/1.1 client for the API, one connection per worker, no pipelining); the server coalesces concurrent single-key GETs into MGETs.")
	return s, nil
}

// writebackRun is live :predict with and without write-back, alternated.
type writebackRun struct{ on, off loadResult }

// liveWriteback measures what writing each live answer back to Redis
// costs: the ranker model (inference in microseconds, so Redis and HTTP
// are the work) served with serving.writeback_ttl and without, the best of
// 2 alternating closed-loop runs each, every request on a new key.
func (h *harness) liveWriteback(gen, data, redisAddr string, common []string) (writebackRun, error) {
	var wb writebackRun
	sinkYAML := fmt.Sprintf("  redis: { addr: %q, namespace: %s, ttl: 48h }\n", redisAddr, lookupNS)
	specs := map[bool]*jobs.Spec{}
	for _, on := range []bool{false, true} {
		o := specOptions{}
		if on {
			o.Extra = "serving:\n  writeback_ttl: 1m\n"
		}
		path, err := h.writeSpecWith(fmt.Sprintf("bench-live-writeback-%t", on), "ranker", data, modelOutputs["ranker"], sinkYAML, o)
		if err != nil {
			return wb, err
		}
		if specs[on], err = jobs.Load(path, nil); err != nil {
			return wb, err
		}
	}
	args := slices.Clone(common)
	predict := []string{"-mode", "predict", "-dim", strconv.Itoa(dim), "-conc", strconv.Itoa(lookupConc)}
	for rep := 0; rep < 2; rep++ {
		for _, on := range []bool{false, true} {
			url, stop, err := startLookup(lookup.Config{Specs: []*jobs.Spec{specs[on]}, Tokens: []string{lookupToken}})
			if err != nil {
				return wb, err
			}
			args[1] = url
			r, err := h.load(gen, append(predict, args...)...)
			stop()
			if err != nil {
				return wb, err
			}
			best := &wb.off
			if on {
				best = &wb.on
			}
			if r.QPS > best.QPS {
				*best = r
			}
		}
	}
	return wb, nil
}

// liveRun is one model's live-fallback measurements.
type liveRun struct {
	batched, half, single loadResult // dynamic batching at full and half load, batch size 1
	rawBatch              int        // rows per batch of the raw ORT measurement
	rawORT                float64    // raw ORT rows/s at rawBatch rows
	// rawORT1 is raw ORT rows/s at one row a run: rawORT/rawORT1 is what
	// the model itself gains from batching, the ceiling of the server's gain.
	rawORT1 float64
}

// liveFallback serves a namespace whose model is name and measures
// `:predict` on keys no store holds with dynamic batching (the server's
// defaults; closed loop, then paced at half its rate) and with one row per
// inference, then raw ONNX Runtime at the batch size the batcher reached.
func (h *harness) liveFallback(gen, name, data, redisAddr string, common []string) (liveRun, error) {
	var lr liveRun
	outs, ok := modelOutputs[name]
	if !ok {
		return lr, fmt.Errorf("-live-model %q: want ranker, heavy or recs", name)
	}
	path, err := h.writeSpec("bench-live-"+name, name, data, outs,
		fmt.Sprintf("  redis: { addr: %q, namespace: %s, ttl: 48h }\n", redisAddr, lookupNS))
	if err != nil {
		return lr, err
	}
	spec, err := jobs.Load(path, nil)
	if err != nil {
		return lr, err
	}
	args := slices.Clone(common)
	predict := []string{"-mode", "predict", "-dim", strconv.Itoa(dim), "-conc", strconv.Itoa(lookupConc)}
	for _, batch := range []int{0, 1} {
		url, stop, err := startLookup(lookup.Config{Specs: []*jobs.Spec{spec}, Tokens: []string{lookupToken}, LiveBatchSize: batch})
		if err != nil {
			return lr, err
		}
		args[1] = url
		// PRECOG_BENCH_LIVE_CPUPROFILE=PREFIX profiles the server during
		// each model's batched live run into PREFIX-MODEL.pprof.
		stopProf := func() {}
		if p := os.Getenv("PRECOG_BENCH_LIVE_CPUPROFILE"); p != "" && batch == 0 {
			if stopProf, err = startCPUProfile(p + "-" + name + ".pprof"); err != nil {
				stop()
				return lr, fmt.Errorf("PRECOG_BENCH_LIVE_CPUPROFILE: %w", err)
			}
		}
		if batch == 1 {
			lr.single, err = h.load(gen, append(predict, args...)...)
		} else {
			lr.batched, err = h.loadBatched(gen, url, append(predict, args...)...)
			stopProf()
			if err == nil {
				lr.half, err = h.loadBatched(gen, url, append(append(slices.Clone(predict), "-rate", fmt.Sprint(lr.batched.QPS/2)), args...)...)
			}
			if err == nil {
				slog.Info("live batches", "model", name, "rows_per_run", fmt.Sprintf("%.1f", lr.batched.MeanBatch), "rows_per_run_half_load", fmt.Sprintf("%.1f", lr.half.MeanBatch))
			}
		}
		stop()
		if err != nil {
			return lr, err
		}
	}
	lr.rawBatch = max(1, int(math.Round(lr.batched.MeanBatch)))
	if lr.rawORT, err = h.rawORTLive(path, lr.rawBatch); err != nil {
		return lr, err
	}
	lr.rawORT1, err = h.rawORTLive(path, 1)
	return lr, err
}

// rawORTLive measures raw ONNX Runtime rows/s of the spec's model on
// prebuilt batches of rows rows, with the sessions live inference uses
// (one non-spinning intra-op thread unless the spec sets model.threads).
func (h *harness) rawORTLive(specPath string, rows int) (float64, error) {
	spec, err := jobs.Load(specPath, nil)
	if err != nil {
		return 0, err
	}
	ms := spec.Model
	if ms.Threads == 0 {
		ms.Threads = 1
	}
	m, err := model.Load(ms, specPath, model.WithoutSpinning())
	if err != nil {
		return 0, err
	}
	defer m.Close()
	runFn, done, err := m.RawRunner(rows)
	if err != nil {
		return 0, err
	}
	defer done()
	for i := 0; i < 5; i++ { // warm up
		if err := runFn(); err != nil {
			return 0, err
		}
	}
	n := 0
	t0 := time.Now()
	for time.Since(t0) < h.cfg.measure {
		if err := runFn(); err != nil {
			return 0, err
		}
		n++
	}
	rps := float64(n*rows) / time.Since(t0).Seconds()
	slog.Info("raw ORT, live sessions", "model", filepath.Base(spec.Model.Path), "rows_per_batch", rows, "rows_per_s", int64(rps))
	return rps, nil
}

// startCPUProfile writes a CPU profile of this process to path until the
// returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// buildLoadgen compiles cmd/precog-bench/loadgen into the scratch directory,
// or returns -loadgen's prebuilt binary (for a machine without Go).
func (h *harness) buildLoadgen() (string, error) {
	if h.cfg.loadgen != "" {
		return filepath.Abs(h.cfg.loadgen)
	}
	root, err := testgen.ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(h.cfg.work, "loadgen")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/precog-bench/loadgen")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/precog-bench/loadgen: %w\n%s", err, b)
	}
	return out, nil
}

// load runs the load generator once and decodes its result.
func (h *harness) load(gen string, args ...string) (loadResult, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(gen, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return loadResult{}, fmt.Errorf("loadgen %v: %w\n%s", args, err, errb.String())
	}
	var r loadResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return loadResult{}, fmt.Errorf("loadgen %v: output %q: %w", args, out.String(), err)
	}
	if r.Requests == 0 {
		return r, fmt.Errorf("loadgen %v: no request succeeded (%d errors, first: %s)", args, r.Errors, r.FirstError)
	}
	slog.Info("load", "args", args[:2], "qps", int64(r.QPS), "p50_us", int64(r.P50us), "p99_us", int64(r.P99us), "errors", r.Errors)
	return r, nil
}

// startLookup serves a lookup API on a free local port and returns its base
// URL and a stop function.
func startLookup(cfg lookup.Config) (string, func(), error) {
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := lookup.New(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("lookup server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("lookup server", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	// Wait until it is ready (models loaded, stores reachable).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			hs.Close()
			srv.Close()
			return "", nil, fmt.Errorf("lookup server at %s not ready after 30s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = srv.Close()
	}
	return url, stop, nil
}
