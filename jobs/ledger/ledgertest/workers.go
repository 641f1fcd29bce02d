package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

func listWorkers(t *testing.T, w ledger.Workers, pool string) []ledger.WorkerInfo {
	t.Helper()
	ws, err := w.ListWorkers(context.Background(), pool)
	if err != nil {
		t.Fatalf("ListWorkers(%q): %v", pool, err)
	}
	return ws
}

func workerIDs(ws []ledger.WorkerInfo) string {
	var ids []string
	for _, w := range ws {
		ids = append(ids, fmt.Sprintf("%s@%s lost=%v", w.ID, w.Pool, w.Lost))
	}
	return strings.Join(ids, ", ")
}

// testWorkers: a heartbeat registers a worker with what it reports; the
// list filters by pool and orders by pool then id; a worker silent for its
// lease is lost (by the ledger's clock) until it beats again, keeping its
// start time; a clean stop removes it. Unattended says a pool whose
// workers are all lost (or that has none) has no one to run its runs.
func testWorkers(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	gpu := ledger.WorkerInfo{ID: "host-1", Pool: "gpu", Devices: []string{"cuda:0", "cuda:1"}, Version: "v1.2.3",
		ModelCache: "recs@abc123", Lease: shortLease, Current: []ledger.ShardRef{{Run: "r1", Shard: 3, Device: "cuda:0"}}}
	cpu := ledger.WorkerInfo{ID: "host-2", Devices: []string{jobs.DeviceCPU}, Version: "v1.2.3", Lease: longLease}
	for _, wi := range []ledger.WorkerInfo{gpu, cpu} {
		if err := l.HeartbeatWorker(ctx, wi); err != nil {
			t.Fatalf("HeartbeatWorker(%s): %v", wi.ID, err)
		}
	}
	all := listWorkers(t, l, "")
	if got := workerIDs(all); len(all) != 2 || !strings.HasPrefix(got, "host-2@default lost=false, host-1@gpu") {
		t.Fatalf("ListWorkers = %s, want host-2 (default) then host-1 (gpu)", got)
	}
	g := all[1]
	if !slices.Equal(g.Devices, gpu.Devices) || g.Version != gpu.Version || g.ModelCache != gpu.ModelCache || g.Lease != shortLease ||
		!slices.Equal(g.Current, gpu.Current) || g.StartedAt.IsZero() || g.HeartbeatAt.Before(g.StartedAt) {
		t.Fatalf("worker read back as %+v, want what it reported (%+v) with its times", g, gpu)
	}
	if got := workerIDs(listWorkers(t, l, "gpu")); !strings.HasPrefix(got, "host-1@gpu") || strings.Contains(got, "host-2") {
		t.Fatalf("ListWorkers(gpu) = %s, want host-1 only", got)
	}

	// host-1 stops heartbeating: lost after one lease; host-2 is not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ws := listWorkers(t, l, "")
		if ws[1].Lost {
			if ws[0].Lost || ws[1].HeartbeatAge <= shortLease {
				t.Fatalf("after host-1's lease: %s, age %s; want host-1 lost (age > %s), host-2 alive", workerIDs(ws), ws[1].HeartbeatAge, shortLease)
			}
			if ws[1].State() != "lost" || ws[0].State() != "up" {
				t.Fatalf("states %q, %q; want up, lost", ws[0].State(), ws[1].State())
			}
			for pool, want := range map[string]struct {
				none bool
				lost int
			}{"gpu": {true, 1}, "": {false, 0}, "other": {true, 0}} {
				none, lost, err := ledger.Unattended(ctx, l, pool)
				if err != nil || none != want.none || (none && lost != want.lost) {
					t.Fatalf("Unattended(%q) = %v, %d lost, %v; want %v, %d lost", pool, none, lost, err, want.none, want.lost)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host-1 not lost 10s after its last heartbeat (lease %s): %s", shortLease, workerIDs(ws))
		}
		time.Sleep(shortLease / 2)
	}
	// It beats again (now holding nothing, with a long lease, so that a
	// slow list after the beat still finds it alive): alive, same start.
	gpu.Current, gpu.Lease = nil, longLease
	if err := l.HeartbeatWorker(ctx, gpu); err != nil {
		t.Fatalf("HeartbeatWorker again: %v", err)
	}
	again := listWorkers(t, l, "gpu")
	if len(again) != 1 || again[0].Lost || len(again[0].Current) != 0 || !again[0].StartedAt.Equal(g.StartedAt) {
		t.Fatalf("after a new heartbeat: %+v, want alive, holding nothing, started at %s", again, g.StartedAt)
	}
	if none, _, err := ledger.Unattended(ctx, l, "gpu"); none || err != nil {
		t.Fatalf("Unattended(gpu) after host-1 beat again = %v, %v; want false", none, err)
	}
	if err := l.RemoveWorker(ctx, "host-1"); err != nil {
		t.Fatalf("RemoveWorker: %v", err)
	}
	if err := l.RemoveWorker(ctx, "never-seen"); err != nil {
		t.Fatalf("RemoveWorker of an unknown worker: %v", err)
	}
	if got := workerIDs(listWorkers(t, l, "")); !strings.HasPrefix(got, "host-2@default") || strings.Contains(got, "host-1") {
		t.Fatalf("after RemoveWorker(host-1): %s, want host-2 only", got)
	}
}

// testWorkerUnable: the runs a worker reports it cannot execute are listed
// with it, and a later heartbeat without them clears them.
func testWorkerUnable(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	since := time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC)
	info := ledger.WorkerInfo{ID: "host-1", Devices: []string{jobs.DeviceCPU}, Lease: longLease,
		Unable: []ledger.Unable{{Run: "r1", Job: "recs", Reason: "spec: ${DATABASE_URL} is not set", Since: since}}}
	if err := l.HeartbeatWorker(ctx, info); err != nil {
		t.Fatalf("HeartbeatWorker: %v", err)
	}
	ws := listWorkers(t, l, "")
	if len(ws) != 1 || len(ws[0].Unable) != 1 || ws[0].Unable[0] != info.Unable[0] {
		t.Fatalf("ListWorkers = %+v, want host-1 unable for %+v", ws, info.Unable)
	}
	info.Unable = nil
	if err := l.HeartbeatWorker(ctx, info); err != nil {
		t.Fatalf("HeartbeatWorker: %v", err)
	}
	if ws := listWorkers(t, l, ""); len(ws) != 1 || len(ws[0].Unable) != 0 {
		t.Fatalf("ListWorkers after a heartbeat without unable runs = %+v, want none", ws)
	}
}
