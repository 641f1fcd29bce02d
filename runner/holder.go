package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// A local run's holder is the process executing it, recorded in the state
// dir (holders/RUN.json) while RunLocal runs it, so that `status` and
// `runs` tell a run whose process is gone (kill -9, a crash, a reboot:
// interrupted) from one that is running. A pid alone is not an identity
// (pids are reused): the record carries the process's start time, in clock
// ticks after boot, and the boot's id, which together name one process
// for the life of the machine.

// holdersDir is the holder records' directory in the state dir.
const holdersDir = "holders"

// Holder is the process executing a local run.
type Holder struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Start is the process's start time in clock ticks after boot
	// (/proc/PID/stat, field 22); 0 where the system has no /proc.
	Start uint64 `json:"start"`
	// Boot is the boot id (/proc/sys/kernel/random/boot_id); "" where
	// unknown.
	Boot string `json:"boot"`
	// Command is the command line that runs the run, secrets redacted:
	// the same command resumes it.
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// holderPath is where runID's holder record lives.
func holderPath(stateDir, runID string) string {
	return filepath.Join(stateDir, holdersDir, runID+".json")
}

// selfHolder describes this process.
func selfHolder() Holder {
	host, _ := os.Hostname()
	start, _ := procStart(os.Getpid())
	args := append([]string{"precog"}, os.Args[1:]...)
	return Holder{Host: host, PID: os.Getpid(), Start: start, Boot: bootID(),
		Command: jobs.RedactSecrets(shellJoin(args)), Since: time.Now().UTC()}
}

// writeHolder records this process as runID's holder and returns the
// function that removes the record (at the end of RunLocal, whatever the
// outcome: a finished run's state is in the ledger).
func writeHolder(stateDir, runID string) (remove func(), err error) {
	path := holderPath(stateDir, runID)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("record the run's process: %w", err)
	}
	b, err := json.Marshal(selfHolder())
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, fmt.Errorf("record the run's process: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("record the run's process: %w", err)
	}
	return func() { os.Remove(path) }, nil
}

// ReadHolder reads runID's holder record; ok is false when there is none
// (the run is not executing, or an older precog ran it).
func ReadHolder(stateDir, runID string) (h Holder, ok bool, err error) {
	b, err := os.ReadFile(holderPath(stateDir, runID))
	if errors.Is(err, os.ErrNotExist) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return Holder{}, false, fmt.Errorf("holder record of run %s: %w", runID, err)
	}
	return h, true, nil
}

// Alive says whether the holder process still runs. known is false when
// this machine cannot tell: the holder ran on another host (a shared state
// dir), or on this host before a reboot is ruled out by no boot id.
func (h Holder) Alive() (alive, known bool) {
	if host, _ := os.Hostname(); host != h.Host {
		return false, false
	}
	if b := bootID(); b != "" && h.Boot != "" && b != h.Boot {
		return false, true // the machine rebooted since
	}
	if h.Start != 0 {
		start, err := procStart(h.PID)
		if err == nil {
			return start == h.Start, true
		}
		if errors.Is(err, os.ErrNotExist) {
			return false, true
		}
	}
	// No /proc: the pid alone (a reused pid reads as alive).
	err := syscall.Kill(h.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM), true
}

// LocalRunGone reports whether an open run of the embedded ledger under
// stateDir has lost the process executing it (the run is interrupted: the
// same command resumes it), with that process's record when there is one.
// Only a running or publishing run can be gone (a pending run never
// started). Without a record on this host, the shards' leases decide: a
// run none of whose running shards has a live lease at now is gone.
func LocalRunGone(stateDir string, run jobs.Run, shards []jobs.Shard, now time.Time) (gone bool, h Holder, known bool) {
	if run.State != jobs.RunRunning && run.State != jobs.RunPublishing {
		return false, Holder{}, false
	}
	h, ok, err := ReadHolder(stateDir, run.ID)
	if err == nil && ok {
		if alive, sure := h.Alive(); sure {
			return !alive, h, true
		}
	}
	for _, s := range shards {
		if s.State == jobs.ShardRunning && s.LeaseUntil.After(now) {
			return false, h, ok
		}
	}
	return true, h, ok
}

// procStart is pid's start time in clock ticks after boot (Linux).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// bootID is this boot's id ("" where the system does not say).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// shellJoin quotes args for a POSIX shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
