package runner

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// EnvStopAfterStage, set to "1" in a process's environment, makes it stop
// itself (SIGSTOP) once, right after its first publish has staged every
// sink and before any cutover. It exists for the end-to-end test of a
// frozen publisher, which must freeze one at that exact point: a poll
// racing a publish of a few milliseconds misses it on a quiet machine.
const EnvStopAfterStage = "PRECOG_TEST_STOP_AFTER_STAGE"

var stopAfterStageOnce sync.Once

// stopAfterStage is the fault point EnvStopAfterStage arms.
func stopAfterStage() {
	if os.Getenv(EnvStopAfterStage) != "1" {
		return
	}
	stopAfterStageOnce.Do(stopSelf)
}

// EnvStopMidShard, set to a number N in a process's environment, makes it
// stop itself (SIGSTOP) once, when it is about to commit the sinks of its
// (N+1)th shard attempt: every row of that shard is written to every sink,
// none is committed, and the ledger still shows the shard running under
// this process's lease. It exists for the end-to-end tests of a straggler,
// which must freeze a worker mid-shard: a signal sent from outside after a
// ledger read can land after the worker has sent its commit, which then
// applies while it is stopped.
const EnvStopMidShard = "PRECOG_TEST_STOP_MID_SHARD"

var (
	midShardMu      sync.Mutex
	midShardCommits int
	midShardStopped bool
)

// stopMidShard is the fault point EnvStopMidShard arms. Before it stops,
// it writes "fault point: stopping mid-shard N" to stderr, so that a test
// knows which shard the frozen process holds even after another worker
// took it over.
func stopMidShard(shard int) {
	v := os.Getenv(EnvStopMidShard)
	if v == "" {
		return
	}
	after, err := strconv.Atoi(v)
	if err != nil || after < 0 {
		return
	}
	midShardMu.Lock()
	stop := !midShardStopped && midShardCommits == after
	midShardCommits++
	midShardStopped = midShardStopped || stop
	midShardMu.Unlock()
	if stop {
		fmt.Fprintf(os.Stderr, "fault point: stopping mid-shard %d\n", shard)
		stopSelf()
	}
}

// EnvStopAfterCommits, set to a count N in a process's environment, makes
// it stop itself (SIGSTOP) once, right after the ledger recorded its N-th
// shard commit and before its claim loop claims again. It exists for the
// end-to-end test of kill -9 and resume, which must kill a run at an
// exact point of its progress whatever the machine's speed.
const EnvStopAfterCommits = "PRECOG_TEST_STOP_AFTER_COMMITS"

var (
	stopAfterCommitsN    = sync.OnceValue(func() int64 { n, _ := strconv.ParseInt(os.Getenv(EnvStopAfterCommits), 10, 64); return n })
	stopAfterCommitsSeen atomic.Int64
)

// committedHere is the fault point EnvStopAfterCommits arms: called once
// per shard commit this process recorded.
func committedHere() {
	if n := stopAfterCommitsN(); n > 0 && stopAfterCommitsSeen.Add(1) == n {
		stopSelf()
	}
}
