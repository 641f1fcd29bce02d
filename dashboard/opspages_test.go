package dashboard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestWorkersAndRejectsPages: /workers lists the ledger's workers with
// their pool, devices, version and held shards, a lost one marked with
// its shards expiring; /runs/{id}/rejects pages through every stored
// rejected row of a run (not the sample), escaped, with links between
// pages.
func TestWorkersAndRejectsPages(t *testing.T) {
	for name, open := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			led, src := open(t)
			ctx := context.Background()
			wl := led.(ledger.Workers)
			if err := wl.HeartbeatWorker(ctx, ledger.WorkerInfo{ID: "host-up", Pool: "gpu", Devices: []string{"cuda:0"}, Version: "v9.9.9",
				Lease: time.Hour, Current: []ledger.ShardRef{{Run: "recs-1", Shard: 4, Device: "cuda:0"}}}); err != nil {
				t.Fatal(err)
			}
			if err := wl.HeartbeatWorker(ctx, ledger.WorkerInfo{ID: "host-dead", Pool: "gpu", Devices: []string{"cpu"}, Lease: time.Millisecond,
				Current: []ledger.ShardRef{{Run: "recs-2", Shard: 7}}}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for { // host-dead is lost once its 1ms lease passed by the ledger's clock
				ws, err := wl.ListWorkers(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(ws) == 2 && ws[0].Lost {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("host-dead not lost: %+v", ws)
				}
				time.Sleep(5 * time.Millisecond)
			}
			ts := newServer(t, Options{Source: src})
			code, body, _ := get(t, ts, "/workers", token)
			if code != 200 {
				t.Fatalf("/workers = %d:\n%s", code, body)
			}
			up, dead := workerRowIn(body, "host-up"), workerRowIn(body, "host-dead")
			for _, want := range []string{"gpu", "cuda:0", "v9.9.9", `href="/runs/recs-1"`, "#4", ">up<"} {
				if !strings.Contains(up, want) {
					t.Errorf("/workers row of host-up lacks %q:\n%s", want, up)
				}
			}
			for _, want := range []string{">lost<", "no heartbeat for", "recs-2", "(expiring)"} {
				if !strings.Contains(dead, want) {
					t.Errorf("/workers row of host-dead lacks %q:\n%s", want, dead)
				}
			}
			if _, body, _ = get(t, ts, "/workers?pool=cpu-pool", token); strings.Contains(body, "host-up") {
				t.Error("/workers?pool=cpu-pool lists a gpu worker")
			}

			// A run with 450 rejects on one shard: 3 pages of 200.
			run := mustCreate(t, led, "scores", 1)
			rs := make([]jobs.Reject, 450)
			for i := range rs {
				rs[i] = jobs.Reject{Key: fmt.Sprintf("<k%d>", i), Position: fmt.Sprintf("part-0.parquet row %d", i), Reason: "NaN"}
			}
			commit(t, led, run.ID, "w-a", 1000, rs...)
			code, body, _ = get(t, ts, "/runs/"+run.ID+"/rejects", token)
			if code != 200 || strings.Count(body, "<tr><td>#0</td>") != 200 || !strings.Contains(body, "Rows 1–200 of 450") ||
				!strings.Contains(body, "<code>&lt;k0&gt;</code>") || !strings.Contains(body, `?page=2" rel="next"`) {
				t.Fatalf("rejects page 1 = %d:\n%.3000s", code, body)
			}
			_, body, _ = get(t, ts, "/runs/"+run.ID+"/rejects?page=3", token)
			if strings.Count(body, "<tr><td>#0</td>") != 50 || !strings.Contains(body, "part-0.parquet row 449") || strings.Contains(body, `rel="next"`) {
				t.Errorf("rejects page 3:\n%.3000s", body)
			}
			if code, _, _ := get(t, ts, "/runs/nope-1/rejects", token); code != 404 {
				t.Errorf("rejects of an unknown run = %d, want 404", code)
			}
		})
	}
}

// workerRowIn is the table row of body whose data-worker is id.
func workerRowIn(body, id string) string {
	i := strings.Index(body, `data-worker="`+id+`"`)
	if i < 0 {
		return ""
	}
	end := strings.Index(body[i:], "</tr>")
	if end < 0 {
		return body[i:]
	}
	return body[i : i+end]
}
