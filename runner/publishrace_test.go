package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/sinks"
)

// cancelAtPublish is a real embedded ledger whose ClaimPublish first
// cancels the run, as a precog cancel (or the dashboard's button) landing
// between the run's last shard commit and its publish does.
type cancelAtPublish struct {
	ledger.Store
	state jobs.RunState
}

func (l cancelAtPublish) ClaimPublish(ctx context.Context, p ledger.PublishLeaseParams) (jobs.Run, error) {
	if err := l.SetRunState(ctx, p.RunID, l.state, "ended by the test"); err != nil {
		return jobs.Run{}, err
	}
	return l.Store.ClaimPublish(ctx, p)
}

// TestEndedBeforePublishSaysWhatHappened: a run ended by another process
// after its last shard committed says so ("was cancelled … nothing was
// published"), not "take the publish step: … run finished", which reads as
// if it published; the error is still a ledger.ErrRunFinished and nothing
// reaches the sink's output.
func TestEndedBeforePublishSaysWhatHappened(t *testing.T) {
	for state, want := range map[jobs.RunState]string{
		jobs.RunCancelled: "was cancelled after its last shard committed, before its publish: nothing was published (ended by the test)",
		jobs.RunFailed:    "failed after its last shard committed, before its publish: nothing was published (ended by the test)",
		jobs.RunSucceeded: "succeeded before this process could publish it: another process published it",
	} {
		t.Run(string(state), func(t *testing.T) {
			dir, spec := fixture(t, dataset)
			state0 := filepath.Join(dir, "state")
			led, err := open.Open(context.Background(), open.Location{StateDir: state0}, open.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer led.Close()
			_, err = RunLocal(context.Background(), spec, LocalOptions{StateDir: state0, Ledger: cancelAtPublish{Store: led, state: state},
				Sinks: []sinks.Sink{parquetSink(t, spec)}})
			if err == nil {
				t.Fatal("a run ended before its publish succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "take the publish step") || strings.Contains(msg, "run finished") {
				t.Errorf("err = %q: says the run finished, not that it ended before its publish", msg)
			}
			if !strings.Contains(msg, want) {
				t.Errorf("err = %q, want it to contain %q", msg, want)
			}
			if !errors.Is(err, ledger.ErrRunFinished) {
				t.Errorf("err = %v, want a ledger.ErrRunFinished", err)
			}
			if files, _ := filepath.Glob(filepath.Join(spec.Sinks.Parquet.Path, "*.parquet")); len(files) > 0 && state != jobs.RunSucceeded {
				t.Errorf("published %v for a run ended before its publish", files)
			}
		})
	}
}
