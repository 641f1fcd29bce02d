package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/sinks"
)

// recordingSink is a sink whose publish step only records what happened;
// onPublish runs inside its Publish.
type recordingSink struct {
	name      string
	mu        sync.Mutex
	published bool
	onPublish func()
}

type noLock struct{}

func (noLock) Lost() <-chan struct{}         { return nil }
func (noLock) Release(context.Context) error { return nil }

func (s *recordingSink) Name() string { return s.name }
func (s *recordingSink) Lock(context.Context, sinks.RunInfo, sinks.Holder) (sinks.Lock, error) {
	return noLock{}, nil
}
func (s *recordingSink) Prepare(context.Context, sinks.RunInfo) error { return nil }
func (s *recordingSink) Shard(context.Context, sinks.RunInfo, int) (sinks.ShardWriter, error) {
	return nil, errors.New("not written")
}
func (s *recordingSink) Stage(context.Context, sinks.RunInfo, []sinks.CommittedShard) error {
	return nil
}
func (s *recordingSink) Publish(context.Context, sinks.RunInfo) error {
	if s.onPublish != nil {
		s.onPublish()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = true
	return nil
}
func (s *recordingSink) Abort(context.Context, sinks.RunInfo) error { return nil }
func (s *recordingSink) Close() error                               { return nil }

func (s *recordingSink) wasPublished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published
}

// TestPublishChecksLeaseBeforeEachSink: a publisher whose publish lease
// another worker took over (it froze past the lease) cuts over no further
// sink: the lease is checked before each sink's Publish, and the step ends
// unfinished for the new holder to complete.
func TestPublishChecksLeaseBeforeEachSink(t *testing.T) {
	ctx := context.Background()
	led, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	run := jobs.Run{ID: "r1", Job: "recs", Version: "v1", Pool: jobs.DefaultPool}
	if err := led.CreateRun(ctx, run, []jobs.Shard{{RunID: "r1", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.Claim(ctx, "r1", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.Complete(ctx, ledger.CompleteParams{RunID: "r1", Shard: 0, Worker: "w", Counts: jobs.Counts{}}); err != nil {
		t.Fatal(err)
	}
	// The publisher renews its lease for 50ms at each check (its claim
	// holds long enough to reach the first one).
	const lease = 50 * time.Millisecond
	if _, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: "r1", Worker: "frozen", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The first sink's cutover outlasts the lease, and another worker
	// takes the publish over meanwhile.
	first := &recordingSink{name: "parquet", onPublish: func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := led.ClaimPublish(ctx, ledger.PublishLeaseParams{RunID: "r1", Worker: "other", Lease: time.Minute})
			if err == nil {
				return
			}
			if !errors.Is(err, ledger.ErrNoShard) || time.Now().After(deadline) {
				t.Errorf("takeover: %v", err)
				return
			}
			time.Sleep(lease / 5)
		}
	}}
	second := &recordingSink{name: "redis"}
	state, msg := publishStep(ctx, &publisher{led: led, snks: []sinks.Sink{first, second},
		info: sinks.RunInfo{Job: "recs", RunID: "r1", Version: "v1"}, spec: &jobs.Spec{}, log: slog.New(slog.DiscardHandler),
		lease: &publishLease{led: led, worker: "frozen", d: lease}})
	if state != "" {
		t.Fatalf("publish step after losing its lease = %s %q, want unfinished", state, msg)
	}
	if !first.wasPublished() || second.wasPublished() {
		t.Fatalf("published: first %v, second %v; want the second sink untouched once the lease was lost", first.wasPublished(), second.wasPublished())
	}
	if err := led.FinishPublish(ctx, ledger.FinishPublishParams{RunID: "r1", Worker: "other", State: jobs.RunSucceeded, Msg: ""}); err != nil {
		t.Fatalf("the new holder finishes the publish: %v", err)
	}
}
