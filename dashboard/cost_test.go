package dashboard

import (
	"context"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestRunPageCost: the run page shows the run's cost as status does (its
// committed shards' CPU and GPU time, busy share, rows per GPU-second),
// and "-" for a run without a recorded cost.
func TestRunPageCost(t *testing.T) {
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	r := mustCreate(t, l, "gpujob", 2)
	for _, c := range []jobs.Cost{
		{CPUSeconds: 3, DeviceSeconds: 2, GPUSampledSeconds: 2, GPUBusySeconds: 1.8, GPURows: 2_000_000},
		{CPUSeconds: 1, DeviceSeconds: 2, GPUSampledSeconds: 2, GPUBusySeconds: 1.8, GPURows: 2_000_000},
	} {
		sh, err := l.Claim(ctx, r.ID, "w", lease)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: sh.Index, Worker: "w", Counts: jobs.Counts{RowsIn: 1000, RowsOut: 1000}, Cost: c}); err != nil {
			t.Fatal(err)
		}
	}
	bare := mustCreate(t, l, "cpujob", 1)
	ts := newServer(t, Options{Source: Shared{L: l, Name: "test"}})
	_, body, _ := get(t, ts, "/runs/"+r.ID, token)
	if want := `<dd class="cost">CPU 4.0 s; GPU 4.0 device-s, 90.0% busy, 1.0M rows per GPU-s</dd>`; !strings.Contains(body, want) {
		t.Errorf("run page lacks %s", want)
	}
	_, body, _ = get(t, ts, "/runs/"+bare.ID, token)
	if !strings.Contains(body, `<dd class="cost">-</dd>`) {
		t.Error(`a run without a cost does not show "-"`)
	}
}
