package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestHugeRunPageStaysSmall: a run of 100,000 shards (some committed by
// several workers, some failed, some running) renders a page, a live part
// and an API answer of bounded size: the shard table is paged, the failed
// list and the timeline are capped, the throughput line is merged by pixel;
// and the counts still cover every shard.
func TestHugeRunPageStaysSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a 100,000-shard run")
	}
	const total = 100_000
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	r, shards := newRun("huge", total)
	if err := l.CreateRun(ctx, r, shards); err != nil {
		t.Fatal(err)
	}
	const committed, failed, running = maxBars + 100, maxFailedRows + 30, 4
	for i := range committed + failed + running {
		w := fmt.Sprintf("w%d", i%8)
		sh, err := l.Claim(ctx, r.ID, w, lease)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		switch {
		case i < committed:
			err = l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: sh.Index, Worker: w, Counts: jobs.Counts{RowsIn: 1000, RowsOut: 1000}})
		case i < committed+failed:
			err = l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: sh.Index, Worker: w, Msg: "boom", Retry: false, MaxAttempts: 1})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ts := newServer(t, Options{Source: Shared{L: l}})
	const limit = 1 << 20
	page := func(path string) string {
		code, body, _ := get(t, ts, path, token)
		if code != 200 {
			t.Fatalf("GET %s = %d", path, code)
		}
		if len(body) > limit {
			t.Errorf("GET %s: %d bytes, want under %d", path, len(body), limit)
		}
		return body
	}
	full := page("/runs/" + r.ID)
	start := time.Now()
	live := page("/runs/" + r.ID + "?part=live")
	t.Logf("a %d-shard run: page %d bytes, live part %d bytes (built and read in %s)", total, len(full), len(live), time.Since(start))
	for name, body := range map[string]string{"page": full, "live part": live} {
		if n := strings.Count(body, "data-shard="); n != ShardPageSize {
			t.Errorf("%s lists %d shard rows, want a page of %d", name, n, ShardPageSize)
		}
		if n := strings.Count(body, "data-bar-shard="); n != maxBars {
			t.Errorf("%s draws %d timeline bars, want the latest %d", name, n, maxBars)
		}
		if !strings.Contains(body, fmt.Sprintf("%d committed, %d running, %d pending, %d failed", committed, running, total-committed-failed-running, failed)) {
			t.Errorf("%s lost the shard counts", name)
		}
		if !strings.Contains(body, "and 30 more failed shards") {
			t.Errorf("%s does not say how many failed shards it left out", name)
		}
	}
	last := page(fmt.Sprintf("/runs/%s?page=%d", r.ID, total/ShardPageSize))
	if !strings.Contains(last, fmt.Sprintf(`data-shard="%d"`, total-1)) || strings.Contains(last, `data-shard="0"`) || !strings.Contains(last, "?part=live&amp;page=200") {
		t.Errorf("the last page does not hold the last shards, or its live part loses the page")
	}
	var api struct {
		Shards []json.RawMessage   `json:"shards"`
		Page   struct{ Total int } `json:"shards_page"`
	}
	if err := json.Unmarshal([]byte(page("/api/runs/"+r.ID)), &api); err != nil || len(api.Shards) != ShardPageSize || api.Page.Total != total {
		t.Errorf("api: %d shards of %d (%v)", len(api.Shards), api.Page.Total, err)
	}
}
