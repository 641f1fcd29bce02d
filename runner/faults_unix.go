//go:build unix && !linux

package runner

import "syscall"

func stopSelf() { _ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP) }
