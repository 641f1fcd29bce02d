package jobs

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve in minimal containers too

	"github.com/robfig/cron/v3"
)

// Defaults applied to fields the spec leaves out.
const (
	DefaultTimezone    = "UTC"
	DefaultConcurrency = ConcurrencyForbid
	// Catchup policies (spec field catchup).
	CatchupNone       = "none"
	CatchupLatest     = "latest"
	CatchupAll        = "all"
	DefaultCatchup    = CatchupLatest
	DefaultMaxCatchup = 10
	// MaxMaxCatchup bounds max_catchup: runs fired at once after downtime.
	MaxMaxCatchup = 1000
	DefaultPool   = "default"
	// MinPriority and MaxPriority bound a spec's priority (and submit --priority).
	MinPriority         = -1000
	MaxPriority         = 1000
	DefaultRowsPerShard = 250_000
	DefaultBatchSize    = 1024
	// DefaultGPUBatchSize is the rows per inference call on a GPU when
	// model.batch_size is left out: issue 33's H200 ran the heavy test model
	// at 18.1M rows/s in batches of 4096 and 23.3M in 16384 (raw ONNX
	// Runtime CUDA); one pipeline unit (runner.ReadRows) then runs as one
	// call.
	DefaultGPUBatchSize = 16384
	// GPUBatchBytes bounds one automatic GPU batch's input tensors.
	GPUBatchBytes              = 64 << 20
	DefaultDevice              = DeviceCPU
	DefaultPrecision           = PrecisionFP32
	DefaultSessions            = 0 // auto: see runner/model.planSessions
	DefaultRedisPublish        = RedisPublishAtomic
	DefaultRedisEncoding       = RedisEncodingJSON
	DefaultRetain              = 2
	DefaultPipelineBatch       = 512
	DefaultPipelineDepth       = 4
	DefaultRedisTimeout        = 5 * time.Second
	DefaultPostgresSchema      = "public"
	DefaultPostgresMode        = PostgresReplace
	DefaultCompression         = CompressionSnappy
	DefaultMaxAttempts         = 3
	DefaultMaxRejectedFraction = 0.01
	DefaultDuplicateKeys       = "fail"
	DefaultTransientWindow     = 60 * time.Second
	DefaultKeepFailed          = 24 * time.Hour
	// MaxKeepFailed bounds retry.keep_failed: staged data is not kept
	// longer than a month.
	MaxKeepFailed = 30 * 24 * time.Hour
	// MinRedisTTL is the shortest sinks.redis.ttl (other than 0, no
	// expiry): a shorter one expires records while the run is still
	// writing, publishing a version with keys missing.
	MinRedisTTL = time.Minute
	// MaxBatchSize bounds model.batch_size (rows per inference call).
	MaxBatchSize = 1 << 20
)

// Reserved output field names: every stored record carries these.
var reservedFields = []string{ColModelVersion, ColComputedAt}

var (
	jobNameRE    = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	poolNameRE   = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	fieldNameRE  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	tableNameRE  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)
	schemaNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	// A features table may be schema-qualified.
	featuresTableRE = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$`)
	namespaceRE     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	deviceRE        = regexp.MustCompile(`^(cpu|cuda:(0|[1-9][0-9]{0,2}))$`)
)

// ValidatePriority checks a run priority (spec priority, submit --priority).
func ValidatePriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("must be between %d and %d (got %d)", MinPriority, MaxPriority, p)
	}
	return nil
}

// ValidatePool checks a worker pool name (spec pool, worker --pool).
func ValidatePool(pool string) error {
	if !poolNameRE.MatchString(pool) {
		return fmt.Errorf("%q must be 1 to 63 lowercase letters, digits and - (e.g. gpu)", pool)
	}
	return nil
}

// applyDefaults fills what the spec leaves out. Numbers are defaulted only
// when absent (or null), so an explicit 0 is still caught by validation.
func (d *decoder) applyDefaults(s *Spec) {
	absent := func(path string) bool { return !d.set[path] }
	if s.Timezone == "" {
		s.Timezone = DefaultTimezone
	}
	if s.Concurrency == "" {
		s.Concurrency = DefaultConcurrency
	}
	s.Pool = PoolOrDefault(s.Pool)
	if s.Catchup == "" {
		s.Catchup = DefaultCatchup
	}
	if absent("max_catchup") {
		s.MaxCatchup = DefaultMaxCatchup
	}
	if absent("source.rows_per_shard") {
		s.Source.RowsPerShard = DefaultRowsPerShard
	}
	if absent("model.batch_size") {
		s.Model.BatchSize = DefaultBatchSize
		s.Model.batchAuto = true
	}
	if s.Model.Device == "" {
		s.Model.Device = DefaultDevice
	}
	if s.Model.Precision == "" {
		s.Model.Precision = DefaultPrecision
	}
	if absent("model.sessions") {
		s.Model.Sessions = DefaultSessions
	}
	if r := s.Sinks.Redis; r != nil {
		r.Normalize(func(f string) bool { return absent("sinks.redis." + f) })
	}
	if p := s.Sinks.Postgres; p != nil {
		p.Normalize(func(f string) bool { return absent("sinks.postgres." + f) })
	}
	if p := s.Sinks.Parquet; p != nil {
		p.Normalize(func(f string) bool { return absent("sinks.parquet." + f) })
	}
	if absent("retry.max_attempts") {
		s.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if absent("retry.transient_window") {
		s.Retry.TransientWindow.Duration = DefaultTransientWindow
	}
	if absent("retry.keep_failed") {
		s.Retry.KeepFailed.Duration = DefaultKeepFailed
	}
	if s.MaxRejectedFraction == nil {
		f := DefaultMaxRejectedFraction
		s.MaxRejectedFraction = &f
	}
	if s.DuplicateKeys == "" {
		s.DuplicateKeys = DefaultDuplicateKeys
	}
}

// validate checks the spec statically (no I/O), recording every problem.
func (d *decoder) validate(s *Spec) {
	switch {
	case s.Name == "":
		d.fail("name", "required (lowercase letters, digits and -, e.g. user-recs)")
	case !jobNameRE.MatchString(s.Name):
		d.fail("name", "%q must be 1 to 63 lowercase letters, digits and - (e.g. user-recs)", s.Name)
	}
	if s.Schedule != "" {
		if strings.HasPrefix(s.Schedule, "TZ=") || strings.HasPrefix(s.Schedule, "CRON_TZ=") {
			d.fail("schedule", "time zone prefixes are not supported here; use the timezone field")
		} else if strings.HasPrefix(s.Schedule, "@every") {
			d.fail("schedule", "%q: @every is not supported; use a 5-field cron expression (e.g. \"0 */4 * * *\")", s.Schedule)
		} else if sched, err := cron.ParseStandard(s.Schedule); err != nil {
			d.fail("schedule", "%q is not a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. \"0 */4 * * *\"): %v", s.Schedule, err)
		} else if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			d.fail("schedule", "%q never fires (no such date)", s.Schedule)
		}
	}
	if _, err := time.LoadLocation(s.Timezone); err != nil || s.Timezone == "Local" {
		d.fail("timezone", "unknown time zone %q (use an IANA name such as UTC or Europe/Paris)", s.Timezone)
	}
	switch s.Concurrency {
	case ConcurrencyForbid, ConcurrencyReplace, ConcurrencyAllow:
	default:
		d.fail("concurrency", "must be forbid, replace or allow (got %q)", s.Concurrency)
	}
	d.validateCatchup(s)
	if err := ValidatePool(s.Pool); err != nil {
		d.fail("pool", "%v", err)
	}
	if err := ValidatePriority(s.Priority); err != nil {
		d.fail("priority", "%v", err)
	}
	d.validateSource(&s.Source)
	d.validateModel(s)
	d.validateSinks(s)
	d.validateChecks(s)
	if s.Retry.MaxAttempts < 1 {
		d.fail("retry.max_attempts", "must be >= 1 (got %d)", s.Retry.MaxAttempts)
	}
	if w := s.Retry.TransientWindow.Duration; w < 0 || w > 24*time.Hour {
		d.fail("retry.transient_window", "must be between 0 (no retries of transient errors) and 24h (got %v)", w)
	}
	if k := s.Retry.KeepFailed.Duration; k < 0 || k > MaxKeepFailed {
		d.fail("retry.keep_failed", "must be between 0 (remove a failed run's staged data at once) and 720h (got %v)", k)
	}
	switch s.DuplicateKeys {
	case "fail", "reject":
	default:
		d.fail("duplicate_keys", "must be fail or reject (got %q)", s.DuplicateKeys)
	}
	if f := *s.MaxRejectedFraction; !(f >= 0 && f <= 1) {
		d.fail("max_rejected_fraction", "must be between 0 and 1 (got %v)", f)
	}
	if f := s.Serving.Features; f != nil {
		if f.DSN == "" {
			d.fail("serving.features.dsn", "required")
		}
		if !featuresTableRE.MatchString(f.Table) {
			d.fail("serving.features.table", "%q is not a valid table name ([a-z_][a-z0-9_]*, optionally schema-qualified)", f.Table)
		}
	}
	if ttl := s.Serving.WritebackTTL.Duration; ttl < 0 {
		d.fail("serving.writeback_ttl", "must be >= 0 (got %v)", ttl)
	} else if ttl > 0 && s.Sinks.Redis == nil {
		d.fail("serving.writeback_ttl", "needs a redis sink to write live results back to")
	}
}

// validateCatchup checks the scheduling fields beyond schedule and
// timezone: they only mean something for a scheduled job.
func (d *decoder) validateCatchup(s *Spec) {
	switch s.Catchup {
	case CatchupNone, CatchupLatest, CatchupAll:
	default:
		d.fail("catchup", "must be none, latest or all (got %q)", s.Catchup)
	}
	if n := s.MaxCatchup; n < 1 || n > MaxMaxCatchup {
		d.fail("max_catchup", "must be between 1 and %d (got %d)", MaxMaxCatchup, n)
	} else if d.set["max_catchup"] && s.Catchup != CatchupAll {
		d.fail("max_catchup", "applies to catchup: all only (catchup is %s)", s.Catchup)
	}
	if d.set["starting_deadline"] && s.StartingDeadline.Duration <= 0 {
		d.fail("starting_deadline", "must be > 0 (leave it out for one schedule interval; got %v)", s.StartingDeadline.Duration)
	}
	if d.set["max_staleness"] && s.MaxStaleness.Duration <= 0 {
		d.fail("max_staleness", "must be > 0 (leave it out to never flag predictions stale; got %v)", s.MaxStaleness.Duration)
	}
	if s.Schedule == "" {
		for _, f := range []string{"catchup", "max_catchup", "starting_deadline"} {
			if d.set[f] {
				d.fail(f, "applies to scheduled jobs only (the spec has no schedule)")
			}
		}
	}
}

func (d *decoder) validateSource(src *SourceSpec) {
	switch {
	case src.Parquet == nil && src.Postgres == nil:
		d.fail("source", "needs exactly one of parquet, postgres (got none)")
	case src.Parquet != nil && src.Postgres != nil:
		d.fail("source", "needs exactly one of parquet, postgres (got both)")
	}
	if p := src.Parquet; p != nil && p.Path == "" {
		d.fail("source.parquet.path", "required (a file, a directory or a glob)")
	}
	if p := src.Postgres; p != nil {
		if p.DSN == "" {
			d.fail("source.postgres.dsn", "required")
		}
		if strings.TrimSpace(p.Query) == "" {
			d.fail("source.postgres.query", "required (a SELECT)")
		}
	}
	if src.Key == "" {
		d.fail("source.key", "required: the entity key column")
	}
	if src.RowsPerShard <= 0 {
		d.fail("source.rows_per_shard", "must be > 0 (got %d)", src.RowsPerShard)
	}
}

func (d *decoder) validateModel(s *Spec) {
	m := &s.Model
	if m.Path == "" {
		d.fail("model.path", "required: the ONNX model file")
	} else if strings.Contains(m.Path, "{{") {
		d.fail("model.path", "templates are rendered only in source.parquet.path, source.postgres.query and sinks.parquet.path")
	}
	if len(m.Inputs) == 0 {
		d.fail("model.inputs", "required: map each ONNX input to source columns, e.g. features: { columns: [f0, f1] }")
	}
	for _, name := range m.InputNames() {
		in := m.Inputs[name]
		p := childPath("model.inputs", name)
		if name == "" {
			d.fail(p, "input name must not be empty")
		}
		d.validateInputForm(m, p, in)
		// A column may appear twice (in one input or in several): models
		// trained on duplicated or derived features exist.
		for i, c := range in.Columns {
			if c == "" {
				d.fail(p+".columns["+strconv.Itoa(i)+"]", "column name must not be empty")
			}
		}
	}
	d.validatePooling(m)
	if len(m.Outputs) == 0 {
		d.fail("model.outputs", "required: map each ONNX output to a stored field name, e.g. score: score")
	}
	fields := map[string]string{}
	for _, name := range m.OutputNames() {
		field := m.Outputs[name]
		p := childPath("model.outputs", name)
		switch {
		case name == "":
			d.fail(p, "output name must not be empty")
		case !fieldNameRE.MatchString(field):
			d.fail(p, "field name %q must match [a-z_][a-z0-9_]{0,62}", field)
		case field == s.Source.Key:
			d.fail(p, "field name %q collides with the key column", field)
		case contains(reservedFields, field):
			d.fail(p, "field name %q is reserved (every record has model_version and computed_at)", field)
		case hasKey(s.Params, field):
			d.fail(p, "field name %q collides with the run param of the same name", field)
		case fields[field] != "":
			d.fail(p, "field name %q is already used by output %q", field, fields[field])
		default:
			fields[field] = name
		}
	}
	if m.BatchSize < 1 {
		d.fail("model.batch_size", "must be > 0 (got %d)", m.BatchSize)
	} else if m.BatchSize > MaxBatchSize {
		d.fail("model.batch_size", "must be <= %d (got %d)", MaxBatchSize, m.BatchSize)
	}
	if !deviceRE.MatchString(m.Device) {
		d.fail("model.device", "must be cpu or cuda:N (got %q)", m.Device)
	}
	if !m.Precision.Valid() {
		d.fail("model.precision", "must be %s or %s (got %q)", PrecisionFP32, PrecisionFP16, m.Precision)
	}
	if m.Threads < 0 {
		d.fail("model.threads", "must be >= 0, 0 = runtime default (got %d)", m.Threads)
	}
	if m.Sessions < 0 {
		d.fail("model.sessions", "must be >= 0, 0 = auto (got %d)", m.Sessions)
	}
}

func (d *decoder) validateSinks(s *Spec) {
	k := &s.Sinks
	if k.Redis == nil && k.Postgres == nil && k.Parquet == nil {
		d.fail("sinks", "at least one of redis, postgres, parquet is required")
	}
	if r := k.Redis; r != nil {
		switch {
		case r.Addr == "" && len(r.Addrs) == 0:
			d.fail("sinks.redis.addr", "required: one server's host:port (or addrs: [...] for a cluster)")
		case r.Addr != "" && len(r.Addrs) > 0:
			d.fail("sinks.redis.addrs", "give either addr or addrs, not both")
		}
		for i, a := range r.Addrs {
			if a == "" {
				d.fail("sinks.redis.addrs["+strconv.Itoa(i)+"]", "must not be empty")
			}
		}
		// A templated namespace ({{.date}}) is checked once rendered.
		if !strings.Contains(r.Namespace, "{{") && !namespaceRE.MatchString(r.Namespace) {
			d.fail("sinks.redis.namespace", "%q must be 1 to 128 of [A-Za-z0-9_.-]", r.Namespace)
		}
		if !r.Publish.Valid() {
			d.fail("sinks.redis.publish", "must be atomic or in_place (got %q)", r.Publish)
		}
		if !r.Encoding.Valid() {
			d.fail("sinks.redis.encoding", "must be json or msgpack (got %q)", r.Encoding)
		}
		if ttl := r.TTL.Duration; ttl < 0 {
			d.fail("sinks.redis.ttl", "must be >= 0, 0 = no expiry (got %v)", ttl)
		} else if ttl > 0 && ttl < MinRedisTTL {
			d.fail("sinks.redis.ttl", "%v is shorter than the minimum %v: records would expire before or soon after the publish (0 = no expiry)", ttl, MinRedisTTL)
		}
		if r.Retain < 1 {
			d.fail("sinks.redis.retain", "must be >= 1 (got %d)", r.Retain)
		}
		if r.DB < 0 {
			d.fail("sinks.redis.db", "must be >= 0 (got %d)", r.DB)
		} else if r.DB != 0 && len(r.Addrs) > 0 {
			d.fail("sinks.redis.db", "Redis Cluster (addrs) has only db 0 (got %d)", r.DB)
		}
		if r.PipelineBatch < 1 {
			d.fail("sinks.redis.pipeline_batch", "must be >= 1 (got %d)", r.PipelineBatch)
		}
		if r.PipelineDepth < 1 {
			d.fail("sinks.redis.pipeline_depth", "must be >= 1 (got %d)", r.PipelineDepth)
		}
		if r.Timeout.Duration <= 0 {
			d.fail("sinks.redis.timeout", "must be > 0 (got %v)", r.Timeout.Duration)
		}
	}
	if p := k.Postgres; p != nil {
		if p.DSN == "" {
			d.fail("sinks.postgres.dsn", "required")
		}
		if !tableNameRE.MatchString(p.Table) {
			d.fail("sinks.postgres.table", "%q is not a valid table name: [a-z_][a-z0-9_]{0,50}", p.Table)
		}
		if !schemaNameRE.MatchString(p.Schema) {
			d.fail("sinks.postgres.schema", "%q is not a valid schema name: [a-z_][a-z0-9_]{0,62}", p.Schema)
		}
		if !p.Mode.Valid() {
			d.fail("sinks.postgres.mode", "must be replace or upsert (got %q)", p.Mode)
		}
		if p.Retain < 1 {
			d.fail("sinks.postgres.retain", "must be >= 1 (got %d)", p.Retain)
		}
		if p.ModelVersionInKey && p.Mode != PostgresUpsert {
			d.fail("sinks.postgres.model_version_in_key", "applies to mode: upsert only (a replace run already holds one model's output)")
		}
		if strings.HasPrefix(p.Table, "precog_") {
			d.fail("sinks.postgres.table", "%q: names starting with precog_ are reserved for precog's own tables", p.Table)
		}
		outFields := map[string]bool{}
		for _, f := range s.Model.Outputs {
			outFields[f] = true
		}
		for i, v := range p.Vector {
			if !outFields[v] {
				d.fail("sinks.postgres.vector["+strconv.Itoa(i)+"]", "%q is not an output field (have: %s)", v, strings.Join(sortedKeys(outFields), ", "))
			}
		}
	}
	if p := k.Parquet; p != nil {
		if p.Path == "" {
			d.fail("sinks.parquet.path", "required: the output directory")
		}
		switch p.Compression {
		case CompressionSnappy, CompressionZstd, CompressionGzip, CompressionNone:
		default:
			d.fail("sinks.parquet.compression", "must be snappy, zstd, gzip or none (got %q)", p.Compression)
		}
		if p.Retain < 1 {
			d.fail("sinks.parquet.retain", "must be >= 1 (got %d)", p.Retain)
		}
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
