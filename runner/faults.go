package runner

import (
	"os"
	"sync"
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
