package model

import (
	"runtime"

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
