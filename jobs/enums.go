package jobs

// The spec's enumerations, each with its one set of values: the sinks, the
// runner and the CLI compare against these constants, never literals.

// RedisPublish is sinks.redis.publish: how a run's records become visible.
type RedisPublish string

const (
	// RedisPublishAtomic writes a run under its own version and switches
	// {namespace}:current to it at publish (the default).
	RedisPublishAtomic RedisPublish = "atomic"
	// RedisPublishInPlace writes the live keys as shards commit: no
	// version switch, no rollback.
	RedisPublishInPlace RedisPublish = "in_place"
)

// Valid reports a known value.
func (p RedisPublish) Valid() bool { return p == RedisPublishAtomic || p == RedisPublishInPlace }

// RedisEncoding is sinks.redis.encoding: how a record is stored. The value
// is also what {namespace}:meta records for a version.
type RedisEncoding string

const (
	// RedisEncodingJSON stores each record as a JSON object (the default).
	RedisEncodingJSON RedisEncoding = "json"
	// RedisEncodingMsgpack stores the same object as a MessagePack map.
	RedisEncodingMsgpack RedisEncoding = "msgpack"
)

// Valid reports a known value.
func (e RedisEncoding) Valid() bool { return e == RedisEncodingJSON || e == RedisEncodingMsgpack }

// PostgresMode is sinks.postgres.mode.
type PostgresMode string

const (
	// PostgresReplace writes each run to its own table and points the view
	// at it at publish (the default).
	PostgresReplace PostgresMode = "replace"
	// PostgresUpsert merges each run into one table by key.
	PostgresUpsert PostgresMode = "upsert"
)

// Valid reports a known value.
func (m PostgresMode) Valid() bool { return m == PostgresReplace || m == PostgresUpsert }

// Concurrency policies (spec field concurrency): what a scheduled tick does
// while the job's previous run is still going.
const (
	ConcurrencyForbid  = "forbid"
	ConcurrencyReplace = "replace"
	ConcurrencyAllow   = "allow"
)

// Parquet sink compressions (sinks.parquet.compression).
const (
	// CompressionSnappy is the default: every reader has it, and it costs
	// a fraction of zstd's CPU (zstd took 19% of a recs job's CPU on 2 cores).
	CompressionSnappy = "snappy"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
	CompressionNone   = "none"
)

// Pooling is model.pooling: how a text model's [N,T,D] output
// (last_hidden_state) becomes one vector per row, over the row's tokens
// (its attention mask). "" is none.
type Pooling string

const (
	PoolingNone Pooling = "none"
	// PoolingMean averages the row's token vectors.
	PoolingMean Pooling = "mean"
	// PoolingCLS takes the first token's vector.
	PoolingCLS Pooling = "cls"
	// PoolingMax takes each dimension's maximum over the row's tokens.
	PoolingMax Pooling = "max"
)

// Reduces reports a pooling that reduces [N,T,D] to [N,D] (mean, cls,
// max): not "" or none.
func (p Pooling) Reduces() bool { return p == PoolingMean || p == PoolingCLS || p == PoolingMax }

// Valid reports a known value ("" included).
func (p Pooling) Valid() bool { return p == "" || p == PoolingNone || p.Reduces() }

// Normalization is model.normalize: how pooled vectors are scaled. "" is
// none.
type Normalization string

const (
	NormalizeNone Normalization = "none"
	// NormalizeL2 scales each pooled vector to unit length.
	NormalizeL2 Normalization = "l2"
)

// Valid reports a known value ("" included).
func (n Normalization) Valid() bool { return n == "" || n == NormalizeNone || n == NormalizeL2 }

// DeviceCPU is model.device (and a worker's --devices entry) for the CPU;
// the others are cuda:N.
const DeviceCPU = "cpu"

// Precision is model.precision: the float width of a model's weights and
// arithmetic. Inputs and outputs keep their types either way.
type Precision string

const (
	// PrecisionFP32 runs the model as it is (the default).
	PrecisionFP32 Precision = "fp32"
	// PrecisionFP16 converts the model's float32 weights and arithmetic
	// to float16 at load (runner/model/fp16.go).
	PrecisionFP16 Precision = "fp16"
)

// Valid reports a known value.
func (p Precision) Valid() bool { return p == PrecisionFP32 || p == PrecisionFP16 }
