package model

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/precog-ml/precog/jobs"
)

// sessionPlan is how many ONNX Runtime sessions a model runs and the
// intra-op threads of each (0: the runtime's default, one per core).
type sessionPlan struct {
	sessions, threads int
}

// autoSessionMaxBytes bounds the model file that sessions: auto doubles
// (each session holds its own copy of the weights).
const autoSessionMaxBytes = 256 << 20

// gpuSessions is sessions: auto's sessions per GPU.
const gpuSessions = 2

// planSessions resolves model.sessions and model.threads. Set sessions
// are kept. With sessions: 0 (auto, the default) a CPU model of at most
// autoSessionMaxBytes on two or more cores gets 2 sessions, each with half
// the cores as intra-op threads (unless model.threads says otherwise):
// the pipeline's own goroutines (read, encode, write) take a core now and
// then, and one session's parallel-for across every core then waits on
// the thread that lost its core, where two half-width sessions keep
// running. Measured on 2 cores: the heavy test model's raw throughput
// 5–8% higher as 2×1 than as 1×2, its job 8–14% faster, the ranker job
// 7–12% faster. A GPU model gets gpuSessions sessions (each runs on its
// own CUDA stream, so one bucket's copies overlap another's compute: on an
// H200 one session left the GPU idle 60–95% of a job). A single core or a
// larger model keep 1.
func planSessions(spec jobs.ModelSpec, modelBytes int) sessionPlan {
	if spec.Sessions > 0 {
		return sessionPlan{sessions: spec.Sessions, threads: spec.Threads}
	}
	if modelBytes > autoSessionMaxBytes {
		return sessionPlan{sessions: 1, threads: spec.Threads}
	}
	if cuda, _ := parseDevice(spec.Device); cuda >= 0 {
		return sessionPlan{sessions: gpuSessions, threads: spec.Threads}
	}
	cpus := runtime.GOMAXPROCS(0) // the container's CPU limit, not the host's cores
	if cpus < 2 {
		return sessionPlan{sessions: 1, threads: spec.Threads}
	}
	threads := spec.Threads
	if threads == 0 {
		threads = max(1, cpus/2)
	}
	return sessionPlan{sessions: 2, threads: threads}
}

// session is one ONNX Runtime session and its reusable run options.
type session struct {
	s  *ort.DynamicAdvancedSession
	ro *ort.RunOptions
}

// sessionOptions builds the options every session of this model shares.
func (m *Model) sessionOptions() (*ort.SessionOptions, error) {
	cuda, err := parseDevice(m.spec.Device)
	if err != nil {
		return nil, m.errorf("model.device", "%v", err)
	}
	if m.spec.Threads < 0 {
		return nil, m.errorf("model.threads", "%d is negative (0 = runtime default)", m.spec.Threads)
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx runtime: session options: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			opts.Destroy()
		}
	}()
	if m.plan.threads > 0 {
		if err := opts.SetIntraOpNumThreads(m.plan.threads); err != nil {
			return nil, m.errorf("model.threads", "%v", err)
		}
	}
	// ORT's intra-op threads spin between runs by default. In precog the
	// same cores also read, encode and write (or serve HTTP), and spinning
	// threads starve those stages: measured on 2 cores, the ranker job ran
	// 1.4-1.9x faster without it. Threads sleep instead. PRECOG_ORT_SPIN=1
	// brings spinning back, except for a model loaded WithoutSpinning.
	if os.Getenv("PRECOG_ORT_SPIN") != "1" || m.opts.noSpin {
		if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
			return nil, fmt.Errorf("onnx runtime: spinning: %w", err)
		}
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx runtime: inter-op threads: %w", err)
	}
	if err := opts.SetGraphOptimizationLevel(ort.GraphOptimizationLevelEnableAll); err != nil {
		return nil, fmt.Errorf("onnx runtime: graph optimisation: %w", err)
	}
	if cuda >= 0 {
		if err := appendCUDA(opts, cuda); err != nil {
			return nil, m.errorf("model.device", "%v", err)
		}
	}
	ok = true
	return opts, nil
}

func (m *Model) startSessions(data []byte) error {
	if err := Init(); err != nil {
		return err
	}
	if m.spec.Sessions < 0 {
		return m.errorf("model.sessions", "%d is negative (0 = auto)", m.spec.Sessions)
	}
	n := m.plan.sessions
	opts, err := m.sessionOptions()
	if err != nil {
		return err
	}
	defer opts.Destroy()
	inNames := make([]string, len(m.inputs))
	for i, in := range m.inputs {
		inNames[i] = in.name
	}
	m.pool = make(chan *session, n)
	m.closing = make(chan struct{})
	for range n {
		s, err := ort.NewDynamicAdvancedSessionWithONNXData(data, inNames, m.outNames, opts)
		if err != nil {
			m.destroySessions()
			if cuda, _ := parseDevice(m.spec.Device); cuda >= 0 {
				return m.errorf("model.device", "cuda:%d: create session for %s: %v", cuda, m.spec.Path, err)
			}
			return m.errorf("model.path", "%s: create ONNX Runtime session: %v", m.spec.Path, localeHint(err))
		}
		ro, err := ort.NewRunOptions()
		if err != nil {
			s.Destroy()
			m.destroySessions()
			return fmt.Errorf("onnx runtime: run options: %w", err)
		}
		ss := &session{s: s, ro: ro}
		m.sessions = append(m.sessions, ss)
		m.pool <- ss
	}
	return nil
}

func (m *Model) destroySessions() {
	for _, s := range m.sessions {
		s.ro.Destroy()
		s.s.Destroy()
	}
	m.sessions = nil
}

// errClosed is returned by Infer after Close.
var errClosed = errors.New("model closed")

// acquire takes a session from the pool, waiting for one to be free.
func (m *Model) acquire(ctx context.Context) (*session, error) {
	select {
	case s := <-m.pool:
		return s, nil
	default:
	}
	select {
	case s := <-m.pool:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.closing:
		return nil, errClosed
	}
}

func (m *Model) release(s *session) { m.pool <- s }

// run runs the session; cancelling ctx terminates a run in progress.
func (s *session) run(ctx context.Context, in, out []ort.Value) error {
	if ctx.Done() == nil {
		return s.s.RunWithOptions(in, out, s.ro)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.ro.Terminate()
		close(fired)
	})
	err := s.s.RunWithOptions(in, out, s.ro)
	if !stop() {
		<-fired
		s.ro.UnsetTerminate()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return err
}
