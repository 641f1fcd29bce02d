package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
	pqsource "github.com/precog-ml/precog/sources/parquet"
)

// objstoreBucket is the bucket of the objstore section's S3 server.
const objstoreBucket = "bench"

// objstore is issue 34's section: the core dataset read from a real S3
// server (versitygw on loopback) against the same files on local disk,
// and the bytes the ranged reads fetched against the bytes of the
// projected column chunks.
func (h *harness) objstore(ctx context.Context) (*section, error) {
	s := &section{Title: fmt.Sprintf("Object storage: the core dataset (%d rows) from an S3 server on loopback (versitygw %s)", h.cfg.rows, testservers.VersityGWVersion)}
	data, err := h.dataset(h.cfg.rows)
	if err != nil {
		return s, err
	}
	srv, err := testservers.StartS3(objstoreBucket)
	if err != nil {
		return s, err
	}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	url := "s3://" + objstoreBucket + "/core/"
	if err := uploadDir(ctx, data, url); err != nil {
		return s, err
	}
	// Disk and S3 alternate three times and each keeps its best, as the
	// core section does for its raw limits.
	var disk, remote float64
	var fetched int64
	for range 3 {
		d, err := rawScan(ctx, data)
		if err != nil {
			return s, fmt.Errorf("scan from disk: %w", err)
		}
		disk = max(disk, d)
		before := objstore.FetchedBytes()
		r, err := rawScan(ctx, url)
		if err != nil {
			return s, fmt.Errorf("scan from S3: %w", err)
		}
		fetched = objstore.FetchedBytes() - before
		remote = max(remote, r)
	}
	s.add(atLeast("raw scan of key + features: rows/s from S3 vs the same files on local disk", remote, disk, "rows/s", 0.8))
	src, err := pqsource.New(url)
	if err != nil {
		return s, err
	}
	cols := append([]string{testgen.KeyColumn}, featureColumns()...)
	need, err := src.ProjectedBytes(ctx, cols)
	if err != nil {
		return s, err
	}
	s.add(atMost("bytes fetched from S3 by one scan vs bytes of the projected column chunks",
		mib(fetched), mib(need), float64(fetched)/float64(need), 1.1))
	s.note("%d files of %d-row row groups; a shard is one file's row groups (%d rows); each file's footer comes from one %d KiB tail read, counted in the bytes fetched.",
		len(src.Files()), 50_000, rowsPerFile, objstore.TailSize>>10)

	// End to end: the ranker job reading from and publishing to the
	// bucket (publish included: footers verified, _SUCCESS, marker and
	// pointer) against the same job on local disk.
	score := map[string]string{"score": "score"}
	var walls [2]time.Duration
	for i, where := range []struct{ data, out string }{
		{data, filepath.Join(h.cfg.work, "out", "objstore-disk")},
		{url, "s3://" + objstoreBucket + "/out/ranker"},
	} {
		spec, err := h.writeSpec(fmt.Sprintf("bench-objstore-%d", i), "ranker", where.data, score, fmt.Sprintf("  parquet: { path: %q }\n", where.out))
		if err != nil {
			return s, err
		}
		st, err := h.runPrecog(ctx, spec, filepath.Join(h.cfg.work, fmt.Sprintf("state-objstore-%d", i)), nil)
		if err != nil {
			return s, err
		}
		walls[i] = st.Wall
	}
	r := atLeast(fmt.Sprintf("ranker job, %d rows: rows/s reading and publishing on S3 vs on local disk (whole command)", h.cfg.rows),
		float64(h.cfg.rows)/walls[1].Seconds(), float64(h.cfg.rows)/walls[0].Seconds(), "rows/s", 0.8)
	r.Target, r.Verdict = "report", "—"
	s.add(r)
	return s, nil
}

// uploadDir copies every file under dir to the object-store URL prefix.
func uploadDir(ctx context.Context, dir, prefix string) error {
	loc, err := objstore.Parse(prefix)
	if err != nil {
		return err
	}
	b, err := objstore.Open(ctx, loc)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return b.Write(ctx, loc.Key+filepath.ToSlash(rel), f, objstore.WriteOptions{})
	})
}
