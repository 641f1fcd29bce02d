// Package jobs holds the job spec (YAML, v1) and the run/shard model that the
// ledger, the runner and the CLI share.
package jobs

import (
	"strings"
	"time"
)

// Spec is a parsed, defaulted and validated job spec (contract 1 of docs/contracts.md).
// Templates ({{.param}}) in paths and queries are already rendered.
type Spec struct {
	Name        string `yaml:"name"`
	Schedule    string `yaml:"schedule"`
	Timezone    string `yaml:"timezone"`
	Concurrency string `yaml:"concurrency"` // forbid | replace | allow
	// Catchup is what a scheduler back from downtime fires of the ticks it
	// missed: none, latest (default) or all (bounded by MaxCatchup).
	Catchup CatchupPolicy `yaml:"catchup,omitempty"`
	// MaxCatchup bounds catchup: all. Default 10.
	MaxCatchup CatchupLimit `yaml:"max_catchup,omitempty"`
	// StartingDeadline: a tick seen later than this after its time is
	// recorded as missed, not fired. 0 (absent): one schedule interval.
	StartingDeadline Duration `yaml:"starting_deadline,omitempty"`
	// MaxStaleness: published predictions older than this are flagged
	// stale. 0 (absent): never.
	MaxStaleness Duration `yaml:"max_staleness,omitempty"`
	// Pool is the worker pool whose workers claim the run's shards
	// ([a-z0-9-]{1,63}). Default "default".
	Pool string `yaml:"pool"`
	// Priority orders claims between runs of one pool: higher first; runs
	// of equal priority share the pool's workers fairly. Default 0, bounded
	// by MinPriority..MaxPriority.
	Priority int `yaml:"priority"`

	Source  SourceSpec  `yaml:"source"`
	Model   ModelSpec   `yaml:"model"`
	Sinks   SinksSpec   `yaml:"sinks"`
	Retry   RetrySpec   `yaml:"retry"`
	Serving ServingSpec `yaml:"serving"`

	// MaxRejectedFraction fails the run when more than this fraction of input
	// rows is rejected (null or non-finite features). Default 0.01.
	MaxRejectedFraction *float64 `yaml:"max_rejected_fraction"`
	// DuplicateKeys is what a key seen twice in one run does: "fail" (the
	// run fails naming the key and both places) or "reject" (a repeat within
	// a shard becomes a reject row; repeats across shards still fail, since
	// they are only known at publish). Default fail.
	DuplicateKeys string `yaml:"duplicate_keys"`
	// Checks, when set, are evaluated between stage and publish against
	// the currently published version (see ChecksSpec). Nil: none, and the
	// spec's hash is what it was before the field existed.
	Checks *ChecksSpec `yaml:"checks,omitempty"`

	// File is the path the spec was loaded from ("" when parsed from bytes).
	File string `yaml:"-"`
	// Raw is the spec's YAML as read, before ${ENV} expansion: what a run
	// records so that it can be cancelled or resumed from another process
	// without secrets ever reaching the ledger.
	Raw []byte `yaml:"-"`
	// Params are the run parameters the templates were rendered with.
	Params map[string]string `yaml:"-"`

	// templateParams are the params the templates reference (sorted).
	templateParams []string
}

// SourceSpec says where rows come from. Exactly one of Parquet, Postgres is set.
type SourceSpec struct {
	Parquet  *ParquetSourceSpec  `yaml:"parquet"`
	Postgres *PostgresSourceSpec `yaml:"postgres"`
	// Key is the entity key column (string or integer).
	Key string `yaml:"key"`
	// RowsPerShard bounds the rows of one shard, the unit of resume. Default 250000.
	RowsPerShard int64 `yaml:"rows_per_shard"`
}

// ParquetSourceSpec reads a file, a directory or a glob of Parquet files.
type ParquetSourceSpec struct {
	// Local, or an s3://, gs:// or azblob:// URL; globs and dt=
	// partitions work on prefixes as on directories.
	Path string `yaml:"path"`
}

// PostgresSourceSpec streams an analyst's SELECT, sharded by an integer column.
type PostgresSourceSpec struct {
	DSN     string `yaml:"dsn"`
	Query   string `yaml:"query"`
	ShardBy string `yaml:"shard_by"`
}

// ModelSpec names the ONNX model and maps source columns to its inputs and
// its outputs to stored fields.
type ModelSpec struct {
	// Local, or an s3://, gs:// or azblob:// URL, fetched once per
	// worker and cached by content hash.
	Path    string `yaml:"path"`
	Version string `yaml:"version"` // default: first 12 hex of the file's sha256
	// Inputs maps an ONNX input name to the columns its tensor is built from.
	Inputs map[string]InputSpec `yaml:"inputs"`
	// Outputs maps an ONNX output name to a field name in the stored record.
	// When a score list and an id list stored here both come from one
	// sorted TopK of the model (the ids straight from its indices or
	// through a constant index-to-id table, the scores through elementwise
	// steps), each run of equal scores in a row is stored in ascending id
	// order, so top-k lists are the same on every device (a CUDA TopK
	// orders ties its own way). Which of several items tied at the k-th
	// score make the list is still the runtime's choice.
	Outputs map[string]string `yaml:"outputs"`
	// BatchSize is the rows per inference call. Left out, the device
	// chooses: 1024 on a CPU; on a GPU 16384, or fewer where a call's
	// inputs would pass 64 MiB (a GPU sits idle between small batches:
	// each pays the copies and kernel launches). A text model's buckets
	// hold at most this many rows (1024 when left out).
	BatchSize int    `yaml:"batch_size"`
	Device    string `yaml:"device"`  // cpu | cuda:N; default cpu
	Threads   int    `yaml:"threads"` // intra-op threads per session, 0 = auto
	// Sessions is the number of concurrent sessions per device. 0 (the
	// default) is auto: 2 half-width sessions for a CPU model on 2+ cores,
	// 2 sessions (CUDA streams) for a GPU model.
	Sessions int `yaml:"sessions"`
	// Pooling reduces a last_hidden_state output [N, T, D] to one vector
	// per row over the attention mask: mean | cls | max | none (default).
	Pooling Pooling `yaml:"pooling"`
	// Normalize scales pooled vectors to unit length: l2 | none (default).
	Normalize Normalization `yaml:"normalize"`
	// Precision is fp32 (default) or fp16: fp16 converts the model's
	// float32 weights and arithmetic to float16 at load (half the weight
	// memory; on a GPU, tensor-core speed), its inputs and outputs kept
	// as they are by casts at the graph's edges. Ops that lose too much in
	// float16 (TopK, Min, Max, Range, CumSum, Resize, the ai.onnx.ml
	// operators, and LayerNormalization, Softmax and the Reduce*
	// accumulations) still compute in float32 between casts. Outputs
	// differ from fp32 within float16's precision (about 3 significant
	// digits); values beyond ±65504 overflow. A model with an operator the
	// converter does not know, or with control flow (If, Loop, Scan), is
	// refused at load: use fp32.
	Precision Precision `yaml:"precision"`

	// batchAuto: batch_size was left out, so the device chooses (set by
	// validation; unexported, so the spec's hash is the same as before).
	batchAuto bool
}

// AutoBatch says that the device chooses the batch size: the spec left
// model.batch_size out (or a spec built in code left it 0).
func (m ModelSpec) AutoBatch() bool { return m.batchAuto || m.BatchSize <= 0 }

// IsGPU says that device names a GPU (cuda:N).
func IsGPU(device string) bool { return strings.HasPrefix(device, "cuda:") }

// BatchRows is the rows per inference call of a model whose inputs take
// rowBytes bytes per row: model.batch_size when the spec sets it; else
// DefaultBatchSize on a CPU, and on a GPU DefaultGPUBatchSize, cut so
// that one batch's inputs stay within GPUBatchBytes.
func (m ModelSpec) BatchRows(rowBytes int) int {
	switch {
	case !m.AutoBatch():
		return m.BatchSize
	case !IsGPU(m.Device):
		return DefaultBatchSize
	case rowBytes > 0:
		return max(1, min(DefaultGPUBatchSize, GPUBatchBytes/rowBytes))
	}
	return DefaultGPUBatchSize
}

// InputSpec builds one input tensor: either several numeric columns stacked
// into [N, len(Columns)], or one list / fixed-size-list column into [N, len].
type InputSpec struct {
	Columns []string `yaml:"columns"`
	Column  string   `yaml:"column"`
	// Text inputs (contract 1): Text names the string column(s) whose
	// token ids, from the HuggingFace tokenizer.json at Tokenizer, feed
	// this input as [N, T], T at most MaxLength (default 512); several
	// columns are joined with a space. MaskOf and ZerosLike name a text
	// input: this input is its attention mask (1 on tokens, 0 on padding)
	// or zeros of its shape (token_type_ids).
	Text      TextColumns `yaml:"text"`
	Tokenizer string      `yaml:"tokenizer"`
	MaxLength int         `yaml:"max_length"`
	MaskOf    string      `yaml:"mask_of"`
	ZerosLike string      `yaml:"zeros_like"`
}

// TextColumns is `text: title` or `text: [title, description]`.
type TextColumns []string

// DefaultMaxLength is a text input's max_length when the spec gives none:
// BERT's position limit.
const DefaultMaxLength = 512

// SinksSpec holds any subset of the three sinks.
type SinksSpec struct {
	Redis    *RedisSinkSpec    `yaml:"redis"`
	Postgres *PostgresSinkSpec `yaml:"postgres"`
	Parquet  *ParquetSinkSpec  `yaml:"parquet"`
}

// RedisSinkSpec: records under {namespace}:{run_version}:{key}, cut over by
// setting {namespace}:current (publish: atomic) or written in place.
type RedisSinkSpec struct {
	Addr      string       `yaml:"addr"`
	Addrs     []string     `yaml:"addrs"` // several nodes: Redis Cluster
	Namespace string       `yaml:"namespace"`
	TTL       Duration     `yaml:"ttl"`
	Publish   RedisPublish `yaml:"publish"` // atomic | in_place; default atomic
	Retain    int          `yaml:"retain"`  // published versions kept; default 2
	Username  string       `yaml:"username"`
	Password  string       `yaml:"password"`
	DB        int          `yaml:"db"`
	TLS       bool         `yaml:"tls"`
	// PipelineBatch is the records per pipeline round trip. Default 512.
	PipelineBatch int `yaml:"pipeline_batch"`
	// PipelineDepth is the pipelines in flight per shard, and as many more
	// may be encoding meanwhile (so memory is at most 2×depth+1 pipeline
	// buffers per shard). Default 4.
	PipelineDepth int      `yaml:"pipeline_depth"`
	Timeout       Duration `yaml:"timeout"`
	// Encoding of the records: json (default) or msgpack, the same object
	// with float32 lists as binary little-endian arrays (about a third of
	// JSON's bytes for embeddings). Readers (the lookup API, its client)
	// decode either; each version's encoding is recorded with it.
	Encoding RedisEncoding `yaml:"encoding"`
}

// PostgresSinkSpec: replace (a table per run behind a view) or upsert.
type PostgresSinkSpec struct {
	DSN    string       `yaml:"dsn"`
	Table  string       `yaml:"table"`
	Schema string       `yaml:"schema"` // default public
	Mode   PostgresMode `yaml:"mode"`   // replace | upsert; default replace
	Retain int          `yaml:"retain"` // run tables kept in replace mode; default 2
	// Vector stores these list fields as pgvector vector(n) where installed.
	Vector []string `yaml:"vector"`
	// ModelVersionInKey (upsert mode) adds model_version to the table's key,
	// so two models' outputs for one partition live side by side.
	ModelVersionInKey bool `yaml:"model_version_in_key"`
}

// ParquetSinkSpec writes one file per shard under Path.
type ParquetSinkSpec struct {
	// Local, or an s3://, gs:// or azblob:// prefix, where each version
	// lands under _versions/ and the _PRECOG pointer makes it current.
	Path        string `yaml:"path"`
	Compression string `yaml:"compression"` // snappy | zstd | gzip | none; default snappy
	// Retain is how many published versions the sink keeps (the current
	// one included) for precog rollback; default 2.
	Retain int `yaml:"retain"`
}

// RetrySpec bounds attempts per shard.
type RetrySpec struct {
	MaxAttempts int `yaml:"max_attempts"` // default 3
	// TransientWindow is how long transient errors (a store restarting,
	// connection refused or reset, timeouts, Redis LOADING) are retried with
	// backoff before they count as a failed attempt; within it they spend
	// none of max_attempts. The same on precog run, run --db and worker (one
	// executor). A permanent error (disk full, permission, bad data) fails
	// the attempt at once. Default 60s.
	TransientWindow Duration `yaml:"transient_window"`
	// KeepFailed is how long a cluster run (precog submit, run --db) that
	// failed with its staged data still good (a shard out of attempts)
	// keeps that data in its sinks, so that `precog retry RUN` within it
	// resumes the run without recomputing its committed shards (precog
	// status RUN says until when; precog gc keeps it; precog cancel RUN
	// removes it now); then a worker of the pool removes it, and a retry
	// recomputes the committed shards. 0 removes it at once. A permanent
	// error, the reject limit and failed checks remove it at once. precog
	// run (the embedded ledger) keeps a failed run open instead. At most
	// 720h. Default 24h.
	KeepFailed Duration `yaml:"keep_failed"`
}

// ServingSpec configures the lookup API for this job's namespace.
type ServingSpec struct {
	// Features names a Postgres table keyed by the entity key whose columns
	// match the model inputs, for live inference on a plain GET miss.
	Features *FeaturesSpec `yaml:"features"`
	// Live enables live inference on a miss. Default true when the model loads.
	Live *bool `yaml:"live"`
	// WritebackTTL writes live results back to Redis with this TTL; 0 = off.
	WritebackTTL Duration `yaml:"writeback_ttl"`
}

// FeaturesSpec is a Postgres table of features keyed by the entity key.
type FeaturesSpec struct {
	DSN   string `yaml:"dsn"`
	Table string `yaml:"table"`
}

// CatchupPolicy is the catchup field: CatchupNone, CatchupLatest or
// CatchupAll.
type CatchupPolicy string

// IsZero leaves the default out of the marshalled spec, so that Spec.Hash
// is the same whether the default is spelled out or not, and the same as
// before the field existed (a run started then still resumes).
func (c CatchupPolicy) IsZero() bool { return c == "" || c == DefaultCatchup }

// CatchupLimit is the max_catchup field.
type CatchupLimit int

// IsZero leaves the default out of the marshalled spec (see
// CatchupPolicy.IsZero).
func (n CatchupLimit) IsZero() bool { return n == 0 || n == DefaultMaxCatchup }

// Duration is a time.Duration that reads "48h", "90s" from YAML.
type Duration struct{ time.Duration }
