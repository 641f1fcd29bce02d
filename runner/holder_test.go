package runner

import (
	"os/exec"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
)

// TestHolderAlive: a holder record names one process: this one is alive;
// the same pid with another start time (a reused pid) is not; an exited
// process is not; another host cannot be told (the leases decide).
func TestHolderAlive(t *testing.T) {
	self := selfHolder()
	if alive, known := self.Alive(); !alive || !known {
		t.Fatalf("this process: alive %v known %v", alive, known)
	}
	if self.Start == 0 {
		t.Skip("no /proc: start times unknown")
	}
	reused := self
	reused.Start++
	if alive, known := reused.Alive(); alive || !known {
		t.Fatalf("same pid, other start time: alive %v known %v, want gone", alive, known)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := self
	dead.PID = cmd.Process.Pid
	if alive, known := dead.Alive(); alive || !known {
		t.Fatalf("exited process: alive %v known %v, want gone", alive, known)
	}
	other := self
	other.Host += "-elsewhere"
	if _, known := other.Alive(); known {
		t.Fatal("a holder on another host read as known")
	}
}

// TestLocalRunGone: a running run whose recorded holder is gone is gone at
// once, whatever its shards' leases say; without a record, a live lease
// keeps it running; a pending run is never gone.
func TestLocalRunGone(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	run := jobs.Run{ID: "r1", State: jobs.RunRunning}
	leased := []jobs.Shard{{State: jobs.ShardRunning, LeaseUntil: now.Add(time.Minute)}}
	if gone, _, _ := LocalRunGone(dir, run, leased, now); gone {
		t.Fatal("no record and a live lease: gone")
	}
	if gone, _, _ := LocalRunGone(dir, run, []jobs.Shard{{State: jobs.ShardRunning, LeaseUntil: now.Add(-time.Second)}}, now); !gone {
		t.Fatal("no record and only lapsed leases: not gone")
	}
	remove, err := writeHolder(dir, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if gone, h, ok := LocalRunGone(dir, run, leased, now); gone || !ok || h.Command == "" {
		t.Fatalf("this process holds it: gone %v, record %v %+v", gone, ok, h)
	}
	remove()
	if _, ok, _ := ReadHolder(dir, run.ID); ok {
		t.Fatal("the record stayed after remove")
	}
	if gone, _, _ := LocalRunGone(dir, jobs.Run{ID: "r2", State: jobs.RunPending}, nil, now); gone {
		t.Fatal("a pending run read as gone")
	}
}
