package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/profile"
)

// checksFixture is a job with checks over Parquet and Redis sinks (real
// stores) whose input a test rewrites between runs.
type checksFixture struct {
	dir, state string
	rdb        *redis.Client
	ns         string
}

func newChecksFixture(t *testing.T) *checksFixture {
	t.Helper()
	dir, _ := fixture(t, testgen.Dataset{Seed: 1, FilesPerDate: 2, RowsPerFile: 1000})
	rd := testservers.Redis(t)
	f := &checksFixture{dir: dir, state: filepath.Join(dir, "state"), rdb: rd.Client(t), ns: rd.Prefix + "scores"}
	body, err := os.ReadFile(filepath.Join(dir, "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	redisLine := fmt.Sprintf("  parquet: { path: out }\n  redis: { addr: %q, db: %d, password: %q, namespace: %s }\n", rd.Addr, rd.DB, rd.Password, f.ns)
	body = bytes.Replace(body, []byte("  parquet: { path: out }\n"), []byte(redisLine), 1)
	body = append(body, `checks:
  rows: { min_ratio: 0.9, max_ratio: 1.2 }
  key_churn: { max: 0.05 }
  outputs:
    score: { max_psi: 0.2, max_null_fraction: 0, range: [0, 1] }
`...)
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// input replaces the job's input with d.
func (f *checksFixture) input(t *testing.T, d testgen.Dataset) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(f.dir, "data")); err != nil {
		t.Fatal(err)
	}
	if _, err := testgen.WriteDataset(filepath.Join(f.dir, "data"), d); err != nil {
		t.Fatal(err)
	}
}

func (f *checksFixture) run(t *testing.T) (Result, error) {
	t.Helper()
	spec, err := jobs.Load(filepath.Join(f.dir, "job.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return RunLocal(context.Background(), spec, LocalOptions{StateDir: f.state})
}

// stores fingerprints what readers see: the Parquet output directory's
// files and contents, and Redis's current version.
func (f *checksFixture) stores(t *testing.T) string {
	t.Helper()
	h := sha256.New()
	var names []string
	root := filepath.Join(f.dir, "out")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	for _, n := range names {
		b, _ := os.ReadFile(n)
		fmt.Fprintf(h, "%s %x\n", n, sha256.Sum256(b))
	}
	cur, err := f.rdb.Get(context.Background(), f.ns+":current").Result()
	if err != nil {
		t.Fatalf("redis current: %v", err)
	}
	return fmt.Sprintf("redis=%s parquet=%x", cur, h.Sum(nil))
}

func (f *checksFixture) report(t *testing.T, led ledger.Checks, runID string) profile.Report {
	t.Helper()
	b, err := led.CheckReport(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var r profile.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *checksFixture) ledger(t *testing.T) *bolt.Ledger {
	t.Helper()
	led, err := bolt.OpenIn(f.state)
	if err != nil {
		t.Fatal(err)
	}
	return led
}

// TestChecksHoldAcceptCancel: the first run publishes with only absolute
// bounds; a refresh with new noise passes; one whose input lost 30% of its
// rows is held with nothing changed in any store, then accepted (published,
// who and why recorded); another held run is discarded by cancel.
func TestChecksHoldAcceptCancel(t *testing.T) {
	f := newChecksFixture(t)
	ctx := context.Background()

	first, err := f.run(t)
	if err != nil {
		t.Fatal(err)
	}
	// A refresh whose features are redrawn (same keys, same distribution).
	f.input(t, testgen.Dataset{Seed: 2, FilesPerDate: 2, RowsPerFile: 1000})
	second, err := f.run(t)
	if err != nil {
		t.Fatalf("a normal refresh was not published: %v", err)
	}
	led := f.ledger(t)
	if r := f.report(t, led, first.Run.ID); !r.FirstRun || !r.Passed {
		t.Errorf("first run's report: %+v", r)
	}
	if r := f.report(t, led, second.Run.ID); r.FirstRun || !r.Passed || r.AgainstRun != first.Run.ID || len(r.Checks) != 6 {
		t.Errorf("second run's report: %+v", r)
	}
	led.Close()
	before := f.stores(t)

	// 30% of the rows lost upstream.
	f.input(t, testgen.Dataset{Seed: 3, FilesPerDate: 2, RowsPerFile: 700})
	_, err = f.run(t)
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("a run that lost 30%% of its rows: %v, want held", err)
	}
	if after := f.stores(t); after != before {
		t.Fatalf("a held run changed the stores:\n%s\n%s", before, after)
	}
	led = f.ledger(t)
	runs, err := led.Runs(ctx, "scores", 1)
	if err != nil {
		t.Fatal(err)
	}
	held := runs[0]
	if held.State != jobs.RunHeld {
		t.Fatalf("run is %s, want held", held.State)
	}
	rep := f.report(t, led, held.ID)
	for _, name := range []string{"rows.min_ratio", "key_churn.max"} {
		if c := findCheck(rep, name); c.Passed || c.Name == "" {
			t.Errorf("%s did not fail: %+v", name, rep.Checks)
		}
	}
	if c := findCheck(rep, "key_churn.max"); c.Value < 0.2 || c.Value > 0.4 || c.Error == "" {
		t.Errorf("churn %v (%s), want about 0.3 with its error", c.Value, c.Error)
	}
	pub, err := PublishHeld(ctx, HeldOptions{Ledger: led, RunID: held.ID, By: "alice", Reason: "upstream dropped inactive users on purpose"})
	if err != nil {
		t.Fatal(err)
	}
	if pub.State != jobs.RunSucceeded {
		t.Fatalf("accepted run is %s", pub.State)
	}
	if acc, err := led.Acceptance(ctx, held.ID); err != nil || acc.By != "alice" {
		t.Fatalf("acceptance: %+v %v", acc, err)
	}
	if cur := f.rdb.Get(ctx, f.ns+":current").Val(); cur != held.Version {
		t.Fatalf("redis current %s, want the accepted version %s", cur, held.Version)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "out", "_SUCCESS")); err != nil {
		t.Fatalf("parquet not published: %v", err)
	}
	led.Close()

	// The accepted version is the new baseline: the same input passes.
	if _, err := f.run(t); err != nil {
		t.Fatalf("a run like the accepted one: %v", err)
	}
	// Back to full size: rows ratio 1/0.7 > max_ratio: held, then discarded.
	f.input(t, testgen.Dataset{Seed: 4, FilesPerDate: 2, RowsPerFile: 1000})
	before = f.stores(t)
	if _, err := f.run(t); !errors.Is(err, ErrHeld) {
		t.Fatalf("a run 43%% larger: %v, want held", err)
	}
	led = f.ledger(t)
	defer led.Close()
	runs, _ = led.Runs(ctx, "scores", 1)
	// gc keeps a held run's staged data for its accept.
	spec, err := jobs.Load(filepath.Join(f.dir, "job.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	gcRep, err := GC(ctx, spec, led, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, e := range gcRep.Entries {
		if e.Version == runs[0].Version {
			if e.Action != GCKept || !strings.Contains(e.Reason, "held") {
				t.Errorf("gc of a held run's %s: %s (%s)", e.Sink, e.Action, e.Reason)
			}
			kept++
		}
	}
	if kept == 0 {
		t.Errorf("gc listed nothing of the held version: %+v", gcRep.Entries)
	}
	gone, err := DiscardHeld(ctx, HeldOptions{Ledger: led, RunID: runs[0].ID, By: "bob", Reason: "bad partition"})
	if err != nil || gone.State != jobs.RunCancelled {
		t.Fatalf("discard: %s %v", gone.State, err)
	}
	if after := f.stores(t); after != before {
		t.Fatalf("a discarded run changed the stores")
	}
	if n := f.rdb.Keys(ctx, f.ns+":"+runs[0].Version+":*").Val(); len(n) != 0 {
		t.Fatalf("discarded run left %d Redis keys", len(n))
	}
}

func findCheck(r profile.Report, name string) profile.Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return profile.Check{}
}
