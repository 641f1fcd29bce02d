package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner"
)

// RunLocal runs a whole job on this machine: plan the shards, read, infer
// and write each one, then publish every sink at once. Here a 16-feature
// ranker model scores 2,000 users from Parquet into Parquet; running the
// same call again after a crash would resume the unfinished run.
func ExampleRunLocal() {
	dir, _ := os.MkdirTemp("", "runlocal-example")
	defer os.RemoveAll(dir)
	if _, err := testgen.Write(filepath.Join(dir, "models"), "ranker"); err != nil {
		fmt.Println(err)
		return
	}
	data := testgen.Dataset{Seed: 1, StringKeys: true, Dates: []string{"2026-11-01"}, FilesPerDate: 2, RowsPerFile: 1000}
	if _, err := testgen.WriteDataset(filepath.Join(dir, "data"), data); err != nil {
		fmt.Println(err)
		return
	}
	spec, err := jobs.Parse([]byte(`
name: user-scores
source:
  parquet: { path: "data/dt={{.date}}" }
  key: user_id
  rows_per_shard: 500
model:
  path: models/ranker.onnx
  inputs:
    features: { column: features }
  outputs: { score: score }
sinks:
  parquet: { path: "out/scores/date={{.date}}" }
`), filepath.Join(dir, "job.yaml"), map[string]string{"date": "2026-11-01"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := runner.RunLocal(context.Background(), spec, runner.LocalOptions{StateDir: filepath.Join(dir, ".precog")})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := res.Run
	fmt.Printf("%s: %d shards, %d rows in, %d rows out, %d rejected\n", r.State, r.Shards, r.Counts.RowsIn, r.Counts.RowsOut, r.Counts.Rejected)
	_, err = os.Stat(filepath.Join(dir, "out/scores/date=2026-11-01/_SUCCESS"))
	fmt.Println("published:", err == nil)
	// Output:
	// succeeded: 4 shards, 2000 rows in, 2000 rows out, 0 rejected
	// published: true
}
