package runner

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
)

// TestSubmit: a checked job becomes a pending run of its plan, with the
// priority asked for; a second submit of the same params while it is
// open is an *ledger.OpenRunError naming the open run.
func TestSubmit(t *testing.T) {
	dir, spec := fixture(t, dataset)
	ctx := context.Background()
	led, err := open.Open(ctx, open.Location{StateDir: filepath.Join(dir, "state")}, open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	c, err := CheckJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prio := 7
	run, shards, err := Submit(ctx, led, spec, c, NewRunOptions{Priority: &prio})
	if err != nil {
		t.Fatal(err)
	}
	got, err := led.Run(ctx, run.ID)
	if err != nil || got.State != jobs.RunPending || got.Priority != 7 || got.Shards != len(c.Plans) || len(shards) != len(c.Plans) || got.ModelVersion != c.Job.Model.Version() {
		t.Errorf("submitted run %+v (%v), want pending, priority 7, %d shards of model %s", got, err, len(c.Plans), c.Job.Model.Version())
	}
	_, _, err = Submit(ctx, led, spec, c, NewRunOptions{})
	if oe := (*ledger.OpenRunError)(nil); !errors.As(err, &oe) || oe.RunID != run.ID {
		t.Errorf("second submit: %v, want an *ledger.OpenRunError naming %s", err, run.ID)
	}
}
