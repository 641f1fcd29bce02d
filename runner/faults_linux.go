package runner

import (
	"runtime"
	"syscall"
)

// stopSelf stops the process (SIGSTOP) before the calling goroutine goes
// on: the signal is sent to the calling thread, which enters the group
// stop on its way back from the syscall. A process-directed kill(getpid)
// lets the kernel pick another thread to start the stop, and the caller
// ran on for a moment: a straggler test's worker, stopped "mid-shard",
// committed that shard first.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
