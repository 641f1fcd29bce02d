package bench

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// rawConfig is one way to run a model raw: sessions side by side, each
// with threads intra-op threads (0: the runtime's default, every core), on
// device ("": the CPU).
type rawConfig struct {
	sessions, threads int
	device            string
}

func (c rawConfig) String() string {
	if c.device != "" {
		return fmt.Sprintf("%d sessions on %s", c.sessions, c.device)
	}
	if c.threads == 0 {
		return fmt.Sprintf("%d session × default threads", c.sessions)
	}
	return fmt.Sprintf("%d sessions × %d threads", c.sessions, c.threads)
}

// rawConfigs are the configurations a raw ORT limit is the best of: one
// session over every core (ONNX Runtime's own default), and the two
// half-width sessions precog's sessions: auto picks on 2+ cores. The
// limit is the model's best on this machine, not the configuration precog
// happens to use.
func rawConfigs() []rawConfig {
	cs := []rawConfig{{sessions: 1}}
	if n := runtime.GOMAXPROCS(0); n >= 2 {
		cs = append(cs, rawConfig{sessions: 2, threads: n / 2})
	}
	return cs
}

// sideBySide runs each fn in its own goroutine for the measure duration
// and returns the calls they made together and the longest time taken.
func sideBySide(measure time.Duration, fns []func() error) (int, time.Duration, error) {
	calls := make([]int, len(fns))
	took := make([]time.Duration, len(fns))
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { calls[i], took[i], errs[i] = loop(measure, fn) })
	}
	wg.Wait()
	total, longest := 0, time.Duration(0)
	for i := range fns {
		if errs[i] != nil {
			return 0, 0, errs[i]
		}
		total += calls[i]
		longest = max(longest, took[i])
	}
	return total, longest, nil
}

// rawORT is the raw limit of a job's model: prebuilt input tensors of the
// spec's batch size run in a loop for the measure duration, in each of
// rawConfigs; the best rows/s.
func (h *harness) rawORT(specPath string) (float64, error) {
	spec, err := jobs.Load(specPath, nil)
	if err != nil {
		return 0, err
	}
	best := 0.0
	for _, c := range rawConfigs() {
		rps, err := h.rawORTWith(spec, specPath, c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c, err)
		}
		slog.Info("raw ORT", "model", filepath.Base(spec.Model.Path), "config", c.String(), "rows_per_s", int64(rps))
		best = max(best, rps)
	}
	return best, nil
}

func (h *harness) rawORTWith(spec *jobs.Spec, specPath string, c rawConfig) (float64, error) {
	ms := spec.Model
	ms.Sessions, ms.Threads = c.sessions, c.threads
	m, err := model.Load(ms, specPath)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	fns := make([]func() error, c.sessions)
	for i := range fns {
		run, done, err := m.RawRunner(m.BatchRows()) // each holds its own session
		if err != nil {
			return 0, err
		}
		defer done()
		for range 5 { // warm up
			if err := run(); err != nil {
				return 0, err
			}
		}
		fns[i] = run
	}
	calls, took, err := sideBySide(h.cfg.measure, fns)
	if err != nil {
		return 0, err
	}
	return float64(calls*m.BatchRows()) / took.Seconds(), nil
}
