package parquet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

func newObjectSink(t *testing.T, path string) *ObjectSink {
	t.Helper()
	s, err := NewObject(testJob, jobs.ParquetSinkSpec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The object-storage Parquet sink passes the sinks conformance suite on a
// real S3 server.
func TestObjectConformance(t *testing.T) {
	sinktest.Exercise(t, sinktest.Harness{
		New: func(t *testing.T) sinks.Sink {
			return newObjectSink(t, testservers.S3(t).URL("out/date={{.date}}"))
		},
		Read: func(ctx context.Context, s sinks.Sink, run sinks.RunInfo) (sinktest.Snapshot, error) {
			return readObjects(ctx, s.(*ObjectSink), run)
		},
		LoseShard: func(ctx context.Context, s sinks.Sink, run sinks.RunInfo, index int) error {
			t, err := s.(*ObjectSink).target(ctx, run)
			if err != nil {
				return err
			}
			return t.b.Delete(ctx, t.part(run.Version, index))
		},
	})
}

// readObjects reads the target as a reader does: the pointer, then every
// part object of the version it names (a version is never changed once
// published, so the two reads cannot mix runs).
func readObjects(ctx context.Context, s *ObjectSink, run sinks.RunInfo) (sinktest.Snapshot, error) {
	snap := sinktest.Snapshot{Rows: map[string]sinktest.Row{}}
	t, err := s.target(ctx, run)
	if err != nil {
		return snap, err
	}
	p, ok, err := readPointer(ctx, t)
	if err != nil || !ok {
		return snap, err
	}
	snap.Version = p.Version
	var keys []string
	if err := t.b.List(ctx, t.version(p.Version), func(o objstore.Object) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return snap, err
	}
	sort.Strings(keys)
	hasSuccess := false
	for _, k := range keys {
		name := strings.TrimPrefix(k, t.version(p.Version))
		switch {
		case name == SuccessFile:
			hasSuccess = true
			continue
		case name == preparedFile, name == publishedFile:
			continue
		case !strings.HasPrefix(name, "part-") || !strings.HasSuffix(name, ".parquet"):
			return snap, fmt.Errorf("unexpected object %s in a published version", k)
		}
		tmp, err := os.CreateTemp("", "objsink-read-*")
		if err != nil {
			return snap, err
		}
		if _, err := t.b.Download(ctx, k, tmp, 1<<30); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return snap, err
		}
		cnt, err := readFile(tmp, run.Key, snap.Rows)
		tmp.Close()
		os.Remove(tmp.Name())
		if err != nil {
			return snap, fmt.Errorf("%s: %w", k, err)
		}
		snap.Records += cnt
	}
	if !hasSuccess {
		return snap, fmt.Errorf("published version %s has no _SUCCESS", p.Version)
	}
	return snap, nil
}

// A prefix holding objects precog did not write is refused and left as it
// is; a prefix another job publishes to too.
func TestObjectSinkNotOwned(t *testing.T) {
	t.Parallel()
	srv := testservers.S3(t)
	ctx := context.Background()
	if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("theirs/date=1/data.csv"), Body: strings.NewReader("a,b")}); err != nil {
		t.Fatal(err)
	}
	s := newObjectSink(t, srv.URL("theirs/date={{.date}}"))
	defer s.Close()
	run := sinktest.NewRun("v1", false, map[string]string{"date": "1"})
	var no *sinks.NotOwnedError
	if err := s.Prepare(ctx, run); !errors.As(err, &no) {
		t.Fatalf("Prepare over a foreign prefix: %v, want a NotOwnedError", err)
	}
	out, err := srv.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Contents) != 1 {
		t.Fatalf("the refused prefix now holds %d objects, want the 1 it had", len(out.Contents))
	}
	other, err := NewObject("another-job", jobs.ParquetSinkSpec{Path: srv.URL("mine/date={{.date}}")})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	orun := run
	orun.Job = "another-job"
	publishObjectRun(t, other, orun)
	if err := s.Prepare(ctx, sinktest.NewRun("v2", false, map[string]string{"date": "1"})); err == nil {
		t.Fatal("a prefix another job published to was accepted")
	}
	s2 := newObjectSink(t, srv.URL("mine/date={{.date}}"))
	defer s2.Close()
	if err := s2.Prepare(ctx, sinktest.NewRun("v2", false, map[string]string{"date": "1"})); !errors.As(err, &no) {
		t.Fatalf("Prepare over another job's published prefix: %v, want a NotOwnedError", err)
	}
}

func publishObjectRun(t *testing.T, s *ObjectSink, run sinks.RunInfo) {
	t.Helper()
	ctx := context.Background()
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	w, err := s.Shard(ctx, run, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(run, 0, 10)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(ctx, run, []sinks.CommittedShard{{Index: 0, Rows: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run); err != nil {
		t.Fatal(err)
	}
}

// A publish cut off after the version was marked published but before
// the pointer moved (a kill -9 between the two PUTs) leaves readers on the
// previous version, whole; the retried publish makes the new one current,
// whole: nothing lost, nothing doubled.
func TestObjectPublishCutOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testservers.S3(t)
	s := newObjectSink(t, srv.URL("out/date={{.date}}"))
	defer s.Close()
	params := map[string]string{"date": "1"}
	v1 := sinktest.NewRun("20261101t000000-aaaa", false, params)
	publishObjectRun(t, s, v1)
	v2 := sinktest.NewRun("20261102t000000-bbbb", false, params)
	if err := s.Prepare(ctx, v2); err != nil {
		t.Fatal(err)
	}
	w, err := s.Shard(ctx, v2, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Batch(v2, 100, 130)
	defer b.Release()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(ctx, v2, []sinks.CommittedShard{{Index: 0, Rows: 30}}); err != nil {
		t.Fatal(err)
	}
	tg, err := s.target(ctx, v2)
	if err != nil {
		t.Fatal(err)
	}
	// The first PUT of Publish happened, the process died before the second.
	if err := tg.b.Write(ctx, tg.version(v2.Version)+publishedFile, strings.NewReader("x"), objstore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	snap, err := readObjects(ctx, s, v1)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != v1.Version || snap.Records != 10 {
		t.Fatalf("after the cut-off publish readers see %s with %d records, want %s with 10", snap.Version, snap.Records, v1.Version)
	}
	// Another process retries the publish.
	s2 := newObjectSink(t, srv.URL("out/date={{.date}}"))
	defer s2.Close()
	if err := s2.Publish(ctx, v2); err != nil {
		t.Fatal(err)
	}
	snap, err = readObjects(ctx, s2, v2)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != v2.Version || snap.Records != 30 || len(snap.Rows) != 30 {
		t.Fatalf("after the retried publish readers see %s with %d records (%d keys), want %s with 30", snap.Version, snap.Records, len(snap.Rows), v2.Version)
	}
}
