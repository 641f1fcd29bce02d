package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// baseSpec is a small valid spec the bad cases mutate.
const baseSpec = `name: recs
source:
  parquet:
    path: "data/dt={{.date}}/*.parquet"
  key: user_id
model:
  path: models/recs.onnx
  inputs:
    features: { columns: [f0, f1, f2] }
  outputs:
    score: score
  batch_size: 256
sinks:
  parquet: { path: "out/date={{.date}}" }
`

var testEnv = map[string]string{
	"REDIS_ADDR":   "localhost:6379",
	"DATABASE_URL": "postgres://u@localhost/db",
	"EMPTY":        "",
	"BS":           "512",
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

var dateParam = map[string]string{"date": "2026-11-01"}

// mutate replaces old by new in baseSpec, failing the test if old is absent.
func mutate(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(baseSpec, old) {
		t.Fatalf("test bug: %q not in baseSpec", old)
	}
	return strings.Replace(baseSpec, old, new, 1)
}

func TestParseBadSpecs(t *testing.T) {
	cases := []struct {
		name   string
		yaml   func(t *testing.T) string
		params map[string]string
		want   string // fragment of the error text
		line   int    // line of the first problem, 0 = do not check
	}{
		{"unknown top-level field", func(t *testing.T) string { return baseSpec + "nmae: x\n" },
			nil, `nmae: unknown field "nmae"; did you mean "name"?`, 15},
		{"unknown nested field", func(t *testing.T) string { return mutate(t, "  batch_size: 256", "  batchsize: 256") },
			nil, `model.batchsize: unknown field "batchsize"; did you mean "batch_size"?`, 12},
		{"unknown sink field", func(t *testing.T) string {
			return baseSpec + "  redis: { adr: x, namespace: recs }\n"
		}, nil, `sinks.redis.adr: unknown field "adr"; did you mean "addr"?`, 15},
		{"unknown field lists known ones", func(t *testing.T) string { return baseSpec + "retry: { zzzzzz: 1 }\n" },
			nil, `retry.zzzzzz: unknown field "zzzzzz" (known fields: keep_failed, max_attempts, transient_window)`, 15},
		{"wrong type", func(t *testing.T) string { return mutate(t, "batch_size: 256", "batch_size: lots") },
			nil, `model.batch_size: expected an integer, got "lots"`, 12},
		{"wrong kind", func(t *testing.T) string {
			return mutate(t, "    features: { columns: [f0, f1, f2] }", "    - features")
		}, nil, `model.inputs: expected a mapping, got a list`, 0},
		{"bad pool", func(t *testing.T) string { return baseSpec + "pool: GPU_1\n" },
			nil, `pool: "GPU_1" must be 1 to 63 lowercase letters, digits and -`, 15},
		{"priority too high", func(t *testing.T) string { return baseSpec + "priority: 1001\n" },
			nil, `priority: must be between -1000 and 1000 (got 1001)`, 15},
		{"priority too low", func(t *testing.T) string { return baseSpec + "priority: -5000\n" },
			nil, `priority: must be between -1000 and 1000 (got -5000)`, 15},
		{"negative batch size", func(t *testing.T) string { return mutate(t, "batch_size: 256", "batch_size: -5") },
			nil, `model.batch_size: must be > 0 (got -5)`, 12},
		{"batch size too large", func(t *testing.T) string { return mutate(t, "batch_size: 256", "batch_size: 2000000") },
			nil, `model.batch_size: must be <= 1048576 (got 2000000)`, 12},
		{"explicit zero rows_per_shard", func(t *testing.T) string {
			return mutate(t, "  key: user_id", "  key: user_id\n  rows_per_shard: 0")
		}, nil, `source.rows_per_shard: must be > 0 (got 0)`, 6},
		{"bad name", func(t *testing.T) string { return mutate(t, "name: recs", "name: User_Recs") },
			nil, `name: "User_Recs" must be 1 to 63 lowercase letters, digits and -`, 1},
		{"missing name", func(t *testing.T) string { return mutate(t, "name: recs", "") },
			nil, `name: required`, 0},
		{"bad cron", func(t *testing.T) string { return baseSpec + "schedule: every day\n" },
			nil, `schedule: "every day" is not a 5-field cron expression`, 15},
		{"six-field cron", func(t *testing.T) string { return baseSpec + "schedule: '0 0 */4 * * *'\n" },
			nil, `schedule: "0 0 */4 * * *" is not a 5-field cron expression`, 15},
		{"cron that never fires", func(t *testing.T) string { return baseSpec + "schedule: '0 0 31 2 *'\n" },
			nil, `schedule: "0 0 31 2 *" never fires`, 15},
		{"cron @every", func(t *testing.T) string { return baseSpec + "schedule: '@every 0s'\n" },
			nil, `schedule: "@every 0s": @every is not supported`, 15},
		{"bad timezone", func(t *testing.T) string { return baseSpec + "timezone: Mars/Olympus_Mons\n" },
			nil, `timezone: unknown time zone "Mars/Olympus_Mons"`, 15},
		{"bad concurrency", func(t *testing.T) string { return baseSpec + "concurrency: queue\n" },
			nil, `concurrency: must be forbid, replace or allow (got "queue")`, 15},
		{"columns and column", func(t *testing.T) string {
			return mutate(t, "{ columns: [f0, f1, f2] }", "{ columns: [f0, f1], column: emb }")
		}, nil, `model.inputs.features: give either columns or column, not both`, 9},
		{"neither columns nor column", func(t *testing.T) string {
			return mutate(t, "{ columns: [f0, f1, f2] }", "{}")
		}, nil, `model.inputs.features: needs columns: [..]`, 9},
		{"redis ttl below the minimum", func(t *testing.T) string { return baseSpec + "  redis: { addr: x, namespace: recs, ttl: 1ms }\n" },
			nil, `sinks.redis.ttl: 1ms is shorter than the minimum 1m0s`, 15},
		{"empty column", func(t *testing.T) string { return mutate(t, "[f0, f1, f2]", `[f0, "", f2]`) },
			nil, `model.inputs.features.columns[1]: column name must not be empty`, 9},
		{"no inputs", func(t *testing.T) string {
			return mutate(t, "  inputs:\n    features: { columns: [f0, f1, f2] }\n", "")
		}, nil, `model.inputs: required`, 0},
		{"no outputs", func(t *testing.T) string { return mutate(t, "  outputs:\n    score: score\n", "") },
			nil, `model.outputs: required`, 0},
		{"bad output field", func(t *testing.T) string { return mutate(t, "score: score", "score: Score") },
			nil, `model.outputs.score: field name "Score" must match [a-z_][a-z0-9_]{0,62}`, 11},
		{"output collides with key", func(t *testing.T) string { return mutate(t, "score: score", "score: user_id") },
			nil, `model.outputs.score: field name "user_id" collides with the key column`, 11},
		{"output reserved", func(t *testing.T) string { return mutate(t, "score: score", "score: computed_at") },
			nil, `model.outputs.score: field name "computed_at" is reserved`, 11},
		{"output collides with param", func(t *testing.T) string { return mutate(t, "score: score", "score: date") },
			nil, `model.outputs.score: field name "date" collides with the run param`, 11},
		{"output field used twice", func(t *testing.T) string { return mutate(t, "score: score", "score: s\n    other: s") },
			nil, `model.outputs.score: field name "s" is already used by output "other"`, 11},
		{"bad device", func(t *testing.T) string { return baseSpec + "  device: gpu\n" },
			nil, `sinks.device: unknown field "device"`, 15},
		{"bad device value", func(t *testing.T) string { return mutate(t, "  batch_size: 256", "  device: gpu") },
			nil, `model.device: must be cpu or cuda:N (got "gpu")`, 12},
		{"bad precision", func(t *testing.T) string { return mutate(t, "  batch_size: 256", "  precision: fp8") },
			nil, `model.precision: must be fp32 or fp16 (got "fp8")`, 12},
		{"negative threads", func(t *testing.T) string { return mutate(t, "  batch_size: 256", "  threads: -1") },
			nil, `model.threads: must be >= 0`, 12},
		{"template in model path", func(t *testing.T) string { return mutate(t, "models/recs.onnx", "models/{{.date}}.onnx") },
			nil, `model.path: templates are rendered only in source.parquet.path`, 7},
		{"no model path", func(t *testing.T) string { return mutate(t, "  path: models/recs.onnx\n", "") },
			nil, `model.path: required`, 0},
		{"no sinks", func(t *testing.T) string {
			return mutate(t, "sinks:\n  parquet: { path: \"out/date={{.date}}\" }\n", "")
		},
			nil, `sinks: at least one of redis, postgres, parquet is required`, 0},
		{"no source", func(t *testing.T) string {
			return mutate(t, "  parquet:\n    path: \"data/dt={{.date}}/*.parquet\"\n", "")
		},
			nil, `source: needs exactly one of parquet, postgres (got none)`, 0},
		{"two sources", func(t *testing.T) string {
			return mutate(t, "  key: user_id", "  key: user_id\n  postgres: { dsn: x, query: select 1 }")
		}, nil, `source: needs exactly one of parquet, postgres (got both)`, 0},
		{"no key", func(t *testing.T) string { return mutate(t, "  key: user_id\n", "") },
			nil, `source.key: required`, 0},
		{"bad redis namespace", func(t *testing.T) string { return baseSpec + "  redis: { addr: x, namespace: \"recs:v1\" }\n" },
			nil, `sinks.redis.namespace: "recs:v1" must be 1 to 128 of [A-Za-z0-9_.-]`, 15},
		{"redis addr and addrs", func(t *testing.T) string {
			return baseSpec + "  redis: { addr: x, addrs: [a, b], namespace: recs }\n"
		}, nil, `sinks.redis.addrs: give either addr or addrs, not both`, 15},
		{"redis no addr", func(t *testing.T) string { return baseSpec + "  redis: { namespace: recs }\n" },
			nil, `sinks.redis.addr: required: one server's host:port (or addrs: [...] for a cluster)`, 15},
		{"redis publish", func(t *testing.T) string {
			return baseSpec + "  redis: { addr: x, namespace: recs, publish: eventually }\n"
		},
			nil, `sinks.redis.publish: must be atomic or in_place (got "eventually")`, 15},
		{"redis encoding", func(t *testing.T) string {
			return baseSpec + "  redis: { addr: x, namespace: recs, encoding: protobuf }\n"
		},
			nil, `sinks.redis.encoding: must be json or msgpack (got "protobuf")`, 15},
		{"redis bad ttl", func(t *testing.T) string { return baseSpec + "  redis: { addr: x, namespace: recs, ttl: 2d }\n" },
			nil, `sinks.redis.ttl: invalid duration "2d": write a number with a unit`, 15},
		{"redis negative ttl", func(t *testing.T) string { return baseSpec + "  redis: { addr: x, namespace: recs, ttl: -1h }\n" },
			nil, `sinks.redis.ttl: must be >= 0`, 15},
		{"redis retain 0", func(t *testing.T) string { return baseSpec + "  redis: { addr: x, namespace: recs, retain: 0 }\n" },
			nil, `sinks.redis.retain: must be >= 1 (got 0)`, 15},
		{"bad table identifier", func(t *testing.T) string {
			return baseSpec + "  postgres: { dsn: x, table: \"users; drop table x\" }\n"
		}, nil, `sinks.postgres.table: "users; drop table x" is not a valid table name`, 15},
		{"bad postgres mode", func(t *testing.T) string { return baseSpec + "  postgres: { dsn: x, table: t, mode: merge }\n" },
			nil, `sinks.postgres.mode: must be replace or upsert (got "merge")`, 15},
		{"bad vector field", func(t *testing.T) string { return baseSpec + "  postgres: { dsn: x, table: t, vector: [emb] }\n" },
			nil, `sinks.postgres.vector[0]: "emb" is not an output field (have: score)`, 15},
		{"bad compression", func(t *testing.T) string {
			return mutate(t, `{ path: "out/date={{.date}}" }`, `{ path: out, compression: lz4 }`)
		},
			nil, `sinks.parquet.compression: must be snappy, zstd, gzip or none (got "lz4")`, 14},
		{"missing env var", func(t *testing.T) string { return baseSpec + "  postgres: { dsn: \"${NOPE}\", table: t }\n" },
			nil, `sinks.postgres.dsn: environment variable NOPE is not set (set it, or give a default: ${NOPE:-value})`, 15},
		{"bad env var name", func(t *testing.T) string { return baseSpec + "  postgres: { dsn: \"${1X}\", table: t }\n" },
			nil, `sinks.postgres.dsn: invalid environment variable name "1X"`, 15},
		{"unterminated env", func(t *testing.T) string { return baseSpec + "  postgres: { dsn: \"${DATABASE_URL\", table: t }\n" },
			nil, `sinks.postgres.dsn: unterminated ${`, 15},
		{"missing template param", func(t *testing.T) string { return baseSpec }, map[string]string{},
			`source.parquet.path: template uses param "date", which was not given: pass --param date=...`, 4},
		{"template with a function", func(t *testing.T) string { return mutate(t, "{{.date}}/*", `{{len .date}}/*`) },
			nil, `source.parquet.path: template "{{len .date}}": only {{.param}} substitutions are supported`, 4},
		{"template syntax", func(t *testing.T) string { return mutate(t, "{{.date}}/*", "{{.date/*") },
			nil, `source.parquet.path: invalid template:`, 4},
		{"path-escaping param", func(t *testing.T) string { return baseSpec }, map[string]string{"date": "../../etc"},
			`--param date: value "../../etc" must not contain "/", "\", ".." or NUL`, 0},
		{"param with a space", func(t *testing.T) string { return baseSpec }, map[string]string{"date": "a b"},
			`--param date: value "a b" may only contain letters, digits and _ . : = -`, 0},
		{"retry zero", func(t *testing.T) string { return baseSpec + "retry: { max_attempts: 0 }\n" },
			nil, `retry.max_attempts: must be >= 1 (got 0)`, 15},
		{"keep_failed negative", func(t *testing.T) string { return baseSpec + "retry: { keep_failed: -1h }\n" },
			nil, `retry.keep_failed: must be between 0 (remove a failed run's staged data at once) and 720h (got -1h0m0s)`, 15},
		{"keep_failed over a month", func(t *testing.T) string { return baseSpec + "retry: { keep_failed: 721h }\n" },
			nil, `retry.keep_failed: must be between 0 (remove a failed run's staged data at once) and 720h (got 721h0m0s)`, 15},
		{"max rejected out of range", func(t *testing.T) string { return baseSpec + "max_rejected_fraction: 1.5\n" },
			nil, `max_rejected_fraction: must be between 0 and 1 (got 1.5)`, 15},
		{"max rejected NaN", func(t *testing.T) string { return baseSpec + "max_rejected_fraction: .nan\n" },
			nil, `max_rejected_fraction: must be between 0 and 1 (got NaN)`, 15},
		{"duplicate field", func(t *testing.T) string { return baseSpec + "name: again\n" },
			nil, `name: duplicate field (first given at line 1)`, 15},
		{"merge key", func(t *testing.T) string { return baseSpec + "retry:\n  <<: {max_attempts: 2}\n" },
			nil, `retry: YAML merge keys (<<) are not supported`, 16},
		{"invalid YAML", func(t *testing.T) string { return mutate(t, "  key: user_id", "  key: [user_id") },
			nil, `job.yaml: invalid YAML:`, 0},
		{"two documents", func(t *testing.T) string { return baseSpec + "---\nname: other\n" },
			nil, `more than one YAML document`, 0},
		{"empty", func(t *testing.T) string { return "# nothing\n" }, nil, `job.yaml: empty job spec`, 0},
		{"not a mapping", func(t *testing.T) string { return "- a\n- b\n" }, nil, `expected a mapping of fields, got a list`, 1},
		{"features table", func(t *testing.T) string { return baseSpec + "serving: { features: { dsn: x, table: \"a b\" } }\n" },
			nil, `serving.features.table: "a b" is not a valid table name`, 15},
		{"writeback without redis", func(t *testing.T) string { return baseSpec + "serving: { writeback_ttl: 1m }\n" },
			nil, `serving.writeback_ttl: needs a redis sink`, 15},
		{"cluster db", func(t *testing.T) string { return baseSpec + "  redis: { addrs: [a, b], namespace: recs, db: 3 }\n" },
			nil, `sinks.redis.db: Redis Cluster (addrs) has only db 0 (got 3)`, 15},
	}
	if len(cases) < 20 {
		t.Fatalf("want at least 20 bad specs, have %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := tc.params
			if params == nil {
				params = dateParam
			}
			s, err := Parse([]byte(tc.yaml(t)), "job.yaml", params, lookup(testEnv))
			if err == nil {
				t.Fatalf("no error; want %q (spec %+v)", tc.want, s)
			}
			if s != nil {
				t.Errorf("spec returned along with error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
			probs := Problems(err)
			if len(probs) == 0 {
				t.Fatalf("error %T is not a *SpecError", err)
			}
			for _, p := range probs {
				if p.File != "job.yaml" {
					t.Errorf("problem %q: File = %q", p, p.File)
				}
			}
			if tc.line > 0 {
				found := false
				for _, p := range probs {
					if strings.Contains(p.Error(), tc.want) {
						found = true
						if p.Line != tc.line {
							t.Errorf("line = %d, want %d (%q)", p.Line, tc.line, p)
						}
					}
				}
				if !found {
					t.Errorf("no single problem contains %q: %v", tc.want, probs)
				}
			}
		})
	}
}

func TestSpecErrorFormat(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(baseSpec, "batch_size: 256", "batch_size: -5", 1)), "job.yaml", dateParam, nil)
	if got, want := err.Error(), "job.yaml: model.batch_size: must be > 0 (got -5) (line 12)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var se *SpecError
	if !errors.As(err, &se) || se.Field != "model.batch_size" || se.Line != 12 || se.File != "job.yaml" {
		t.Errorf("errors.As: %+v", se)
	}
	if got := (&SpecError{Field: "name", Msg: "required"}).Error(); got != "name: required" {
		t.Errorf("without file: %q", got)
	}
}

// All problems are reported at once, sorted by line.
func TestAllProblemsSortedByLine(t *testing.T) {
	y := strings.NewReplacer(
		"name: recs", "name: Recs",
		"key: user_id", "key: user_id\n  rows_per_shard: -1",
		"batch_size: 256", "batch_size: 0\n  device: tpu",
		"[f0, f1, f2]", `[f0, ""]`,
	).Replace(baseSpec) + "bogus: 1\n"
	_, err := Parse([]byte(y), "job.yaml", dateParam, nil)
	probs := Problems(err)
	var fields []string
	for i, p := range probs {
		fields = append(fields, p.Field)
		if i > 0 && p.Line < probs[i-1].Line {
			t.Errorf("not sorted by line: %v", probs)
		}
	}
	want := []string{"name", "source.rows_per_shard", "model.inputs.features.columns[1]", "model.batch_size", "model.device", "bogus"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields = %v\nwant %v\nerr: %v", fields, want, err)
	}
}

// A type error on a field does not also produce a derived validation error.
func TestNoDerivedErrors(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(baseSpec, "batch_size: 256", "batch_size: x", 1)), "job.yaml", dateParam, nil)
	if n := len(Problems(err)); n != 1 {
		t.Errorf("want 1 problem, got %d: %v", n, err)
	}
	// An unset env var in a required field is one problem, not two.
	_, err = Parse([]byte(baseSpec+"  redis: { addr: \"${NOPE}\", namespace: recs }\n"), "job.yaml", dateParam, nil)
	if p := Problems(err); len(p) != 1 || p[0].Field != "sinks.redis.addr" {
		t.Errorf("want 1 problem at sinks.redis.addr, got %v", err)
	}
}

func TestContractExample(t *testing.T) {
	t.Setenv("REDIS_ADDR", "localhost:6379")
	t.Setenv("DATABASE_URL", "postgres://precog@localhost/precog")
	path := filepath.Join("testdata", "contract1.yaml")
	s, err := Load(path, map[string]string{"date": "2026-11-01"})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", s.Name, "user-recs"},
		{"schedule", s.Schedule, "0 */4 * * *"},
		{"source path", s.Source.Parquet.Path, filepath.Join(dir, "data/users/dt=2026-11-01/*.parquet")},
		{"key", s.Source.Key, "user_id"},
		{"rows per shard", s.Source.RowsPerShard, int64(250000)},
		{"model path", s.Model.Path, filepath.Join(dir, "models/recs.onnx")},
		{"inputs", s.Model.Inputs, map[string]InputSpec{"features": {Columns: []string{"f0", "f1", "f2"}}}},
		{"outputs", s.Model.Outputs, map[string]string{"score": "score", "topk_items": "items"}},
		{"redis addr", s.Sinks.Redis.Addr, "localhost:6379"},
		{"redis ttl", s.Sinks.Redis.TTL.Duration, 48 * time.Hour},
		{"redis publish", s.Sinks.Redis.Publish, RedisPublishAtomic},
		{"postgres dsn", s.Sinks.Postgres.DSN, "postgres://precog@localhost/precog"},
		{"postgres table", s.Sinks.Postgres.Table, "user_recs"},
		{"parquet out", s.Sinks.Parquet.Path, filepath.Join(dir, "out/user_recs/date=2026-11-01")},
		{"retry", s.Retry.MaxAttempts, 3},
		{"template params", s.TemplateParams(), []string{"date"}},
		{"param names", s.ParamNames(), []string{"date"}},
		{"file", s.File, path},
		{"checks rows", *s.Checks.Rows.MinRatio, 0.9},
		{"checks churn", *s.Checks.KeyChurn.Max, 0.05},
		{"checks score range", s.Checks.Outputs["score"].Range, []float64{0, 1}},
		// topk_items is the output name; checks are keyed by stored field.
		{"checks items overlap", *s.Checks.Outputs["items"].MinOverlapAtK, 0.5},
		{"checks on_failure", s.Checks.OnFailure, "hold"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	y := baseSpec + "  redis: { addr: x, namespace: recs }\n  postgres: { dsn: x, table: t }\n"
	y = strings.Replace(y, "  batch_size: 256\n", "", 1)
	s, err := Parse([]byte(y), "", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"timezone", s.Timezone, "UTC"},
		{"concurrency", s.Concurrency, "forbid"},
		{"pool", s.Pool, "default"},
		{"priority", s.Priority, 0},
		{"rows_per_shard", s.Source.RowsPerShard, int64(250000)},
		{"batch_size", s.Model.BatchSize, 1024},
		{"device", s.Model.Device, "cpu"},
		{"precision", string(s.Model.Precision), "fp32"},
		{"sessions (auto)", s.Model.Sessions, 0},
		{"threads", s.Model.Threads, 0},
		{"redis publish", s.Sinks.Redis.Publish, RedisPublishAtomic},
		{"redis retain", s.Sinks.Redis.Retain, 2},
		{"redis pipeline batch", s.Sinks.Redis.PipelineBatch, 512},
		{"redis pipeline depth", s.Sinks.Redis.PipelineDepth, 4},
		{"redis timeout", s.Sinks.Redis.Timeout.Duration, 5 * time.Second},
		{"redis ttl", s.Sinks.Redis.TTL.Duration, time.Duration(0)},
		{"postgres mode", s.Sinks.Postgres.Mode, PostgresReplace},
		{"postgres schema", s.Sinks.Postgres.Schema, "public"},
		{"postgres retain", s.Sinks.Postgres.Retain, 2},
		{"parquet compression", s.Sinks.Parquet.Compression, "snappy"},
		{"retry", s.Retry.MaxAttempts, 3},
		{"retry keep_failed", s.Retry.KeepFailed.Duration, 24 * time.Hour},
		{"max rejected", s.MaxRejected(), 0.01},
		// No file: relative paths stay relative to the working directory.
		{"model path", s.Model.Path, "models/recs.onnx"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if z, err := Parse([]byte(y+"retry: { keep_failed: 0s }\n"), "", dateParam, nil); err != nil || z.Retry.KeepFailed.Duration != 0 {
		t.Errorf("retry.keep_failed: 0s = %v, %v; want 0 (remove at once), not the default", z.Retry.KeepFailed, err)
	}
	if got := (&Spec{}).MaxRejected(); got != 0.01 {
		t.Errorf("MaxRejected of a hand-built spec = %v", got)
	}
	loc, err := s.Location()
	if err != nil || loc != time.UTC {
		t.Errorf("Location = %v, %v", loc, err)
	}
}

func TestEnvExpansion(t *testing.T) {
	env := lookup(testEnv)
	cases := []struct{ in, want, err string }{
		{"plain", "plain", ""},
		{"${REDIS_ADDR}", "localhost:6379", ""},
		{"redis://${REDIS_ADDR}/0", "redis://localhost:6379/0", ""},
		{"${NOPE:-fallback}", "fallback", ""},
		{"${EMPTY:-fallback}", "fallback", ""},
		{"${EMPTY}", "", ""},
		{"${NOPE:-}", "", ""},
		{"$$", "$", ""},
		{"$${REDIS_ADDR}", "${REDIS_ADDR}", ""},
		{"select $1, $x from t$", "select $1, $x from t$", ""},
		{"${NOPE}", "", "environment variable NOPE is not set"},
		{"${}", "", "invalid environment variable name"},
		{"${A B}", "", "invalid environment variable name"},
		{"x${REDIS_ADDR", "", "unterminated ${"},
	}
	for _, c := range cases {
		got, msg := expandEnv(c.in, env)
		if c.err != "" {
			if !strings.Contains(msg, c.err) {
				t.Errorf("expandEnv(%q): message %q, want %q", c.in, msg, c.err)
			}
			continue
		}
		if msg != "" || got != c.want {
			t.Errorf("expandEnv(%q) = %q, %q; want %q", c.in, got, msg, c.want)
		}
	}
}

// Env vars work in numeric and duration fields, quoted or not; comments are
// never expanded.
func TestEnvInTypedFields(t *testing.T) {
	y := strings.Replace(baseSpec, "batch_size: 256", "batch_size: ${BS}  # ${NOT_EXPANDED}", 1) +
		"  redis: { addr: \"${REDIS_ADDR}\", namespace: recs, ttl: \"${TTL:-36h}\", pipeline_depth: \"${BS}\" }\n"
	s, err := Parse([]byte(y), "job.yaml", dateParam, lookup(testEnv))
	if err != nil {
		t.Fatal(err)
	}
	if s.Model.BatchSize != 512 || s.Sinks.Redis.TTL.Duration != 36*time.Hour || s.Sinks.Redis.PipelineDepth != 512 {
		t.Errorf("batch %d ttl %v depth %d", s.Model.BatchSize, s.Sinks.Redis.TTL, s.Sinks.Redis.PipelineDepth)
	}
	// A value that looks like null stays a string when it comes from the env.
	s, err = Parse([]byte(y+"  postgres: { dsn: \"${NUL}\", table: t }\n"), "job.yaml", dateParam,
		lookup(map[string]string{"REDIS_ADDR": "r", "BS": "1", "NUL": "null"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Sinks.Postgres.DSN != "null" {
		t.Errorf("dsn = %q", s.Sinks.Postgres.DSN)
	}
}

func TestPostgresSourceTemplate(t *testing.T) {
	y := strings.Replace(baseSpec, "  parquet:\n    path: \"data/dt={{.date}}/*.parquet\"\n",
		"  postgres:\n    dsn: x\n    query: \"select * from f where dt = '{{ .date }}' and region = '{{.region}}'\"\n", 1)
	s, err := Parse([]byte(y), "job.yaml", map[string]string{"date": "2026-11-01", "region": "eu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "select * from f where dt = '2026-11-01' and region = 'eu'"; s.Source.Postgres.Query != want {
		t.Errorf("query = %q", s.Source.Postgres.Query)
	}
	if got := s.TemplateParams(); !reflect.DeepEqual(got, []string{"date", "region"}) {
		t.Errorf("TemplateParams = %v", got)
	}
	if got := s.ParamNames(); !reflect.DeepEqual(got, []string{"date", "region"}) {
		t.Errorf("ParamNames = %v", got)
	}
}

func TestRelativeAndAbsolutePaths(t *testing.T) {
	y := strings.Replace(baseSpec, "path: models/recs.onnx", "path: /models/recs.onnx", 1)
	s, err := Parse([]byte(y), filepath.Join("jobs", "recs", "job.yaml"), dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Model.Path != "/models/recs.onnx" {
		t.Errorf("absolute path changed: %q", s.Model.Path)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "jobs", "recs", "data", "dt=2026-11-01", "*.parquet"); s.Source.Parquet.Path != want {
		t.Errorf("source path %q, want %q", s.Source.Parquet.Path, want)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml: cannot read job spec: no such file or directory") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxSpecBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big, nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

// A YAML alias bomb fails quickly with an error instead of exhausting memory.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &c [" + strings.Repeat("col, ", 199) + "col]\nmodel:\n  inputs:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "    in%d: { columns: *c }\n", i)
	}
	start := time.Now()
	_, err := Parse([]byte(b.String()), "job.yaml", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "job spec too large: more than 100000 values") {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// Aliases of small values work.
func TestAliases(t *testing.T) {
	y := strings.Replace(baseSpec, "[f0, f1, f2]", "&cols [f0, f1, f2]", 1)
	y = strings.Replace(y, "  outputs:", "    other: { columns: *cols }\n  outputs:", 1)
	s, err := Parse([]byte(y), "job.yaml", dateParam, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Model.Inputs["other"].Columns; !reflect.DeepEqual(got, []string{"f0", "f1", "f2"}) {
		t.Errorf("aliased columns = %v", got)
	}
	if got := s.Model.InputNames(); !reflect.DeepEqual(got, []string{"features", "other"}) {
		t.Errorf("InputNames = %v", got)
	}
}

// Valid variants parse; each line is appended to or replaces part of baseSpec.
func TestParseValidVariants(t *testing.T) {
	cases := []struct{ name, old, new string }{
		{"cuda device", "  batch_size: 256", "  device: cuda:1\n  sessions: 2\n  threads: 4"},
		{"cron descriptor", "name: recs", "name: recs\nschedule: '@daily'\ntimezone: America/New_York"},
		{"list column", "{ columns: [f0, f1, f2] }", "{ column: embedding }"},
		{"redis cluster in place", "sinks:", "sinks:\n  redis: { addrs: [a:1, b:2], namespace: my.recs-v1, publish: in_place, ttl: 0s }"},
		{"postgres upsert", "sinks:", "sinks:\n  postgres: { dsn: x, table: user_recs, schema: analytics, mode: upsert, retain: 5, vector: [score] }"},
		{"postgres source", "  parquet:\n    path: \"data/dt={{.date}}/*.parquet\"\n", "  postgres: { dsn: x, query: 'select * from t', shard_by: id }\n"},
		{"no key collision with similar names", "score: score", "score: user_id_score"},
		{"zero rejected", "name: recs", "name: recs\nmax_rejected_fraction: 0"},
		{"serving", "name: recs", "name: recs\nserving: { features: { dsn: x, table: feats.users }, live: false }"},
		{"null sink is absent", "sinks:", "sinks:\n  redis:"},
		{"pool and priority", "name: recs", "name: recs\npool: gpu-a100\npriority: -1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := mutate(t, c.old, c.new)
			s, err := Parse([]byte(y), "job.yaml", dateParam, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "pool and priority" && (s.Pool != "gpu-a100" || s.Priority != -1000) {
				t.Errorf("pool, priority = %q, %d; want gpu-a100, -1000", s.Pool, s.Priority)
			}
			if c.name == "null sink is absent" && s.Sinks.Redis != nil {
				t.Error("null redis sink decoded as present")
			}
		})
	}
}

// TestSinkOverlapsSource: a Parquet sink that is, is inside or contains the
// source path would replace the input at publish; the spec is refused.
func TestSinkOverlapsSource(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data", "dt=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "data"), filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	spec := func(src, sink string) string {
		return "name: j\nsource:\n  parquet: { path: \"" + src + "\" }\n  key: id\nmodel:\n  path: m.onnx\n  inputs: { x: { columns: [a] } }\n  outputs: { y: y }\nsinks:\n  parquet: { path: \"" + sink + "\" }\n"
	}
	bad := []struct{ src, sink, want string }{
		{"data", "data", "is the source's path too"},
		{"data/dt=*/*.parquet", "data", "is the source's path too"},
		{"data/dt=1/part.parquet", "data", "contains the source path"},
		{"data", "data/out", "is inside the source path"},
		{"data", "alias/out", "is inside the source path"},
		{"data/dt=1", ".", "contains the source path"},
		{"s3://b/data/dt=*/*.parquet", "s3://b/data", "is the source's path too"},
		{"s3://b/data", "s3://b/data/out?endpoint=http://x", "is inside the source path"},
	}
	for _, b := range bad {
		_, err := Parse([]byte(spec(b.src, b.sink)), filepath.Join(dir, "job.yaml"), nil, nil)
		if err == nil || !strings.Contains(err.Error(), "sinks.parquet.path") || !strings.Contains(err.Error(), b.want) {
			t.Errorf("source %s, sink %s: err = %v, want sinks.parquet.path: …%s", b.src, b.sink, err, b.want)
		}
	}
	for _, ok := range [][2]string{{"data", "out"}, {"data/dt=*/x.parquet", "data-out"}, {"data/dt=1", "dataset"},
		{"s3://b/data", "s3://b/out"}, {"s3://b/data", "data"}, {"data", "gs://b/data"}} {
		s, err := Parse([]byte(spec(ok[0], ok[1])), filepath.Join(dir, "job.yaml"), nil, nil)
		if err != nil {
			t.Errorf("source %s, sink %s: %v", ok[0], ok[1], err)
			continue
		}
		// URLs are kept as written, not joined to the spec's directory.
		for i, p := range []string{s.Source.Parquet.Path, s.Sinks.Parquet.Path} {
			if IsURL(ok[i]) && p != ok[i] {
				t.Errorf("URL %q rewritten to %q", ok[i], p)
			}
		}
	}
}
