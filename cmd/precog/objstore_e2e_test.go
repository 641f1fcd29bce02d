package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// uploadFixture copies a fixture directory or file (relative to fixtures)
// to the same key in the test's bucket.
func uploadFixture(t *testing.T, srv *testservers.S3Bucket, rel string) {
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
	root := filepath.Join(fixtures, rel)
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		key, err := filepath.Rel(fixtures, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return b.Write(ctx, filepath.ToSlash(key), f, objstore.WriteOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClusterObjectStorage: two real workers run a job whose dataset and
// model are on a real S3 server (versitygw), found through the AWS SDK's
// standard variables, and whose Parquet sink publishes there; one worker
// is killed with SIGKILL mid-run and replaced. The published outputs (the
// version _PRECOG names, for Parquet) equal an uninterrupted `precog run`
// of the same job over the same files on disk, in every sink, row for row.
func TestClusterObjectStorage(t *testing.T) {
	srv := testservers.S3(t) // puts AWS_* of the server into the environment the workers inherit
	uploadFixture(t, srv, filepath.Join("data", "users", "dt="+e2eDate))
	uploadFixture(t, srv, filepath.Join("models", "heavy.onnx"))
	j := e2eAllSinks
	c := newE2ECluster(t, j, testservers.Postgres(t).DSN, testservers.Postgres(t).DSN, testservers.Redis(t))
	want := c.reference(j)
	body := strings.NewReplacer(
		`"data/users/dt={{.date}}"`, `"`+srv.URL("data/users/dt={{.date}}")+`"`,
		"models/heavy.onnx", srv.URL("models/heavy.onnx"),
		`"out/scores/date={{.date}}"`, `"`+srv.URL("out/scores/date={{.date}}")+`"`).Replace(j.specBody())
	if strings.Count(body, "s3://") != 3 {
		t.Fatalf("spec does not name both URLs:\n%s", body)
	}
	c.spec = writeSpec(t, c.dir, "job.yaml", body)
	// Nothing of the dataset or the model is reachable on disk from the
	// cluster's directory: only the bucket has them.
	for _, sub := range []string{"data", "models"} {
		if err := os.Remove(filepath.Join(c.dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	id := c.submit()
	w1, w2 := c.worker(), c.worker()
	c.waitFor("a shard committed", 2*time.Minute, func() bool { return c.committed(id) > 0 })
	if c.run(id).State.Terminal() {
		t.Fatal("the run ended before the kill: nothing was interrupted")
	}
	_ = w1.cmd.Process.Kill()
	<-w1.done
	w3 := c.worker()
	r := c.waitTerminal(id, 3*time.Minute)
	if r.State != jobs.RunSucceeded {
		t.Fatalf("run %s: %s (%s)", id, r.State, r.Error)
	}
	stopWorkers(t, w2, w3)
	if _, err := os.Stat(filepath.Join(c.dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("the Parquet sink wrote to the local disk: %v", err)
	}
	downloadPublished(t, srv, "out/scores/date="+e2eDate, filepath.Join(c.dir, "out", "scores", "date="+e2eDate))
	got := c.checkOutputs(j, want)
	if len(got.parquet) != 4000 {
		t.Fatalf("parquet sink holds %d rows, want 4000", len(got.parquet))
	}
}

// downloadPublished copies the version the pointer under prefix names into
// dir, as a reader following _PRECOG would read it.
func downloadPublished(t *testing.T, srv *testservers.S3Bucket, prefix, dir string) {
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
	raw, err := b.ReadAll(ctx, prefix+"/_PRECOG", 1<<16)
	if err != nil {
		t.Fatalf("the pointer: %v", err)
	}
	var p struct{ Version, Job string }
	if err := json.Unmarshal(raw, &p); err != nil || p.Version == "" || p.Job != "scores" {
		t.Fatalf("the pointer %s: %+v, %v", raw, p, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vprefix := prefix + "/_versions/" + p.Version + "/"
	var keys []string
	if err := b.List(ctx, vprefix, func(o objstore.Object) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	success := false
	for _, k := range keys {
		name := strings.TrimPrefix(k, vprefix)
		success = success || name == "_SUCCESS"
		if !strings.HasSuffix(name, ".parquet") {
			continue
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Download(ctx, k, f, 1<<30); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if !success {
		t.Fatalf("the published version %s has no _SUCCESS", p.Version)
	}
}

// TestParquetSinkBucketRefusesWrites: a run whose Parquet sink is a bucket
// the credentials may read but not write fails before computing anything,
// with an error naming the target, the permission and that nothing was
// published; the bucket holds nothing more than before.
func TestParquetSinkBucketRefusesWrites(t *testing.T) {
	srv := testservers.S3(t)
	dir := workdir(t)
	spec := writeSpec(t, dir, "job.yaml", strings.Replace(rankerSpec, `"out/scores/date={{.date}}"`, `"`+srv.URL("out/scores/date={{.date}}")+`"`, 1))
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, precogBin, "--state-dir", filepath.Join(dir, ".precog"), "run", spec, "--param", "date="+e2eDate, "--no-progress")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), srv.ReadOnlyEnv(t)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("precog run into a read-only bucket: %v, want a failed run\n%s", err, stderr.String())
	}
	msg := stderr.String()
	for _, want := range []string{srv.URL("out/scores/date=" + e2eDate), "s3:PutObject", "nothing was published"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "panic") {
		t.Errorf("stderr shows a panic:\n%s", msg)
	}
	out, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Contents) != 0 {
		t.Fatalf("the refused bucket holds %d objects (first %s)", len(out.Contents), aws.ToString(out.Contents[0].Key))
	}
}
