package runner

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/sinks"
)

// TestRunCacheOpenDoesNotBlockOtherRuns: a run whose sinks take long to
// open (a sink down within its transient window) holds up only the claim
// loops that need that run: another run opens meanwhile, and a second
// loop asking for the slow run waits for the one open, which it then
// shares.
func TestRunCacheOpenDoesNotBlockOtherRuns(t *testing.T) {
	_, spec := fixture(t, dataset)
	runOf := func() jobs.Run {
		led, err := bolt.OpenIn(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { led.Close() })
		return submit(t, led, spec)
	}
	slow, fast := runOf(), runOf()
	c := newRunCache(4, newModelCache(2), slog.New(slog.DiscardHandler))
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	c.openSinks = func(ctx context.Context, s *jobs.Spec) ([]sinks.Sink, error) {
		if calls++; calls == 1 { // the slow run's
			close(entered)
			<-release
		}
		return []sinks.Sink{parquetSink(t, s)}, nil
	}
	type opened struct {
		o   *openRun
		err error
	}
	first, second := make(chan opened, 1), make(chan opened, 1)
	go func() { o, err := c.open(context.Background(), slow, jobs.DeviceCPU); first <- opened{o, err} }()
	<-entered
	go func() { o, err := c.open(context.Background(), slow, jobs.DeviceCPU); second <- opened{o, err} }()
	done := make(chan opened, 1)
	go func() { o, err := c.open(context.Background(), fast, jobs.DeviceCPU); done <- opened{o, err} }()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		c.release(r.o)
	case <-time.After(time.Minute):
		t.Fatal("another run did not open within a minute while the slow run's sinks were opening")
	}
	select {
	case <-second:
		t.Fatal("a second loop got the slow run before it was open")
	default:
	}
	close(release)
	a, b := <-first, <-second
	if a.err != nil || b.err != nil || a.o != b.o || a.o.job == nil {
		t.Fatalf("the slow run's two opens: %v / %v, shared %v", a.err, b.err, a.o == b.o)
	}
	if calls != 2 {
		t.Errorf("sinks opened %d times for 2 runs", calls)
	}
	c.release(a.o)
	c.release(b.o)
	c.closeAll()
}
