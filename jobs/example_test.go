package jobs_test

import (
	"fmt"

	"github.com/precog-ml/precog/jobs"
)

// Parse loads a job spec from bytes: ${ENV} expanded, defaults applied,
// {{.param}} templates rendered, every field validated.
func ExampleParse() {
	spec := []byte(`
name: user-scores
source:
  parquet: { path: "data/users/dt={{.date}}" }
  key: user_id
model:
  path: models/scores.onnx
  inputs:
    features: { columns: [f0, f1, f2] }
  outputs:
    score: score
sinks:
  redis: { addr: "${REDIS_ADDR}", namespace: scores }
`)
	env := func(k string) (string, bool) {
		if k == "REDIS_ADDR" {
			return "127.0.0.1:6379", true
		}
		return "", false
	}
	s, err := jobs.Parse(spec, "", map[string]string{"date": "2026-11-01"}, env)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.Name, s.Source.Parquet.Path, s.Sinks.Redis.Addr, s.Model.BatchSize)
	// Output: user-scores data/users/dt=2026-11-01 127.0.0.1:6379 1024
}

// Every problem of a bad spec comes back at once, each naming its field
// and line; Problems lists them for a caller that wants them one by one.
func ExampleProblems() {
	spec := []byte(`
name: User Scores
source:
  parquet: { path: data/users }
  key: user_id
  rows_per_shard: -5
model:
  path: models/scores.onnx
  inputs:
    features: { columns: [f0] }
  outputs: { score: score }
  batchsize: 10
sinks:
  parquet: { path: out/scores }
`)
	_, err := jobs.Parse(spec, "job.yaml", nil, nil)
	for _, p := range jobs.Problems(err) {
		fmt.Println(p)
	}
	// Output:
	// job.yaml: name: "User Scores" must be 1 to 63 lowercase letters, digits and - (e.g. user-recs) (line 2)
	// job.yaml: source.rows_per_shard: must be > 0 (got -5) (line 6)
	// job.yaml: model.batchsize: unknown field "batchsize"; did you mean "batch_size"? (line 12)
}
