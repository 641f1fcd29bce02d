package parquet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/sources"
	"github.com/precog-ml/precog/sources/sourcetest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// upload copies every file under dir to the bucket under prefix.
func upload(t testing.TB, srv *testservers.S3Bucket, dir, prefix string) {
	t.Helper()
	ctx := context.Background()
	loc, err := objstore.Parse(srv.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return b.Write(ctx, prefix+filepath.ToSlash(rel), f, objstore.WriteOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The Parquet source passes the conformance suite over objects on a real
// S3 server, named by a glob over dt= partitions.
func TestObjectSourceConformance(t *testing.T) {
	sourcetest.Run(t, sourcetest.Harness{New: func(t *testing.T, rows int) sourcetest.Fixture {
		srv := testservers.S3(t)
		dir := t.TempDir()
		per := int64(rows) / 3
		var keys []string
		for f := range 3 {
			start, n := int64(f)*per, per
			if f == 2 {
				n = int64(rows) - start
			}
			writePgFile(t, filepath.Join(dir, fmt.Sprintf("dt=2026-11-0%d", f+1), "part-0.parquet"), start, n, 100)
			for i := start; i < start+n; i++ {
				keys = append(keys, makePgRow(i).Key)
			}
		}
		// Files the source must skip, as on disk.
		if err := os.WriteFile(filepath.Join(dir, "dt=2026-11-01", "_SUCCESS"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		writePgFile(t, filepath.Join(dir, "dt=2026-11-01", "_tmp", "x.parquet"), 0, 10, 10)
		upload(t, srv, dir, "data/")
		src, err := New(srv.URL("data/dt=*"))
		if err != nil {
			t.Fatal(err)
		}
		if got := len(src.Files()); got != 3 {
			t.Fatalf("resolved %d files, want 3: %v", got, src.Files())
		}
		return sourcetest.Fixture{Source: src, Key: "key", Keys: keys, RowsPerShard: 200, ExactRows: true}
	}})
}

// A shard read from object storage fetches its footer and the chunks of
// its own row groups and projected columns, little more; and it reads the
// same rows as the same file on disk. Not parallel: it reads the process's
// fetched-bytes counter.
func TestObjectShardFetchesOnlyItsChunks(t *testing.T) {
	srv := testservers.S3(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "f.parquet")
	writeArrowFile(t, local, 0, 40_000, 5000)
	upload(t, srv, dir, "in/")
	src := mustNew(t, srv.URL("in/f.parquet"))
	lsrc := mustNew(t, local)
	plans := mustPlan(t, src, 10_000)
	lplans := mustPlan(t, lsrc, 10_000)
	if len(plans) != 4 || len(lplans) != 4 {
		t.Fatalf("%d shards from S3, %d from disk; want 4", len(plans), len(lplans))
	}
	cols := []string{"id", "emb"}
	of, err := openFile(local)
	if err != nil {
		t.Fatal(err)
	}
	need, err := shardRanges(of.rdr.MetaData(), []int{2, 3}, []int{0, 4})
	of.Close()
	if err != nil {
		t.Fatal(err)
	}
	var needBytes int64
	for _, r := range need {
		needBytes += r.Len
	}
	before := objstore.FetchedBytes()
	recs := readShard(t, src, plans[1], sources.ReadOptions{Columns: cols, BatchSize: 1000})
	fetched := objstore.FetchedBytes() - before
	lrecs := readShard(t, lsrc, lplans[1], sources.ReadOptions{Columns: cols, BatchSize: 1000})
	defer releaseAll(recs)
	defer releaseAll(lrecs)
	got, want := int64Column(t, recs, "id"), int64Column(t, lrecs, "id")
	if len(got) != 10_000 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("S3 shard read %d ids, disk %d; equal: %v", len(got), len(want), fmt.Sprint(got) == fmt.Sprint(want))
	}
	st, _ := os.Stat(local)
	limit := needBytes*11/10 + min(st.Size(), objstore.TailSize)
	t.Logf("fetched %d bytes for %d bytes of projected chunks (file %d bytes)", fetched, needBytes, st.Size())
	if fetched > limit {
		t.Fatalf("fetched %d bytes, over %d (projected chunks %d + 10%% + the tail)", fetched, limit, needBytes)
	}
}

// An object rewritten after planning is refused by Open, naming it.
func TestObjectChangedSincePlan(t *testing.T) {
	t.Parallel()
	srv := testservers.S3(t)
	dir := t.TempDir()
	writePgFile(t, filepath.Join(dir, "c.parquet"), 0, 100, 50)
	upload(t, srv, dir, "")
	s := mustNew(t, srv.URL("c.parquet"))
	plans := mustPlan(t, s, 100)
	writePgFile(t, filepath.Join(dir, "c.parquet"), 1000, 100, 50)
	upload(t, srv, dir, "")
	_, err := s.Open(context.Background(), plans[0].Plan, sources.ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "changed since") || !strings.Contains(err.Error(), srv.URL("c.parquet")) {
		t.Fatalf("open of a rewritten object: %v", err)
	}
}

// Nothing matched, a bad URL and a missing bucket are errors naming the path.
func TestObjectResolveErrors(t *testing.T) {
	t.Parallel()
	srv := testservers.S3(t)
	for _, p := range []string{srv.URL("nothing/here"), "s3://" + srv.Bucket + "/x?bogus=1", "s3://no-such-bucket-precog/x.parquet"} {
		_, err := New(p)
		if err == nil || !strings.Contains(err.Error(), strings.SplitN(p, "?", 2)[0]) {
			t.Errorf("New(%q) = %v, want an error naming it", p, err)
		}
	}
}
