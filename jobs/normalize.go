package jobs

// Normalize fills the Redis sink fields left out with their defaults: the
// one place they are applied, for specs loaded from YAML and specs built
// in code alike. unset reports whether a numeric field (its YAML name
// under sinks.redis) was left out, so that an explicit 0 stays and fails
// validation; nil treats a zero value as left out.
func (r *RedisSinkSpec) Normalize(unset func(field string) bool) {
	if unset == nil {
		unset = func(string) bool { return true }
	}
	if r.Publish == "" {
		r.Publish = DefaultRedisPublish
	}
	if r.Encoding == "" {
		r.Encoding = DefaultRedisEncoding
	}
	if r.Retain == 0 && unset("retain") {
		r.Retain = DefaultRetain
	}
	if r.PipelineBatch == 0 && unset("pipeline_batch") {
		r.PipelineBatch = DefaultPipelineBatch
	}
	if r.PipelineDepth == 0 && unset("pipeline_depth") {
		r.PipelineDepth = DefaultPipelineDepth
	}
	if r.Timeout.Duration == 0 && unset("timeout") {
		r.Timeout.Duration = DefaultRedisTimeout
	}
}

// Normalize fills the Postgres sink fields left out with their defaults
// (see RedisSinkSpec.Normalize for unset).
func (p *PostgresSinkSpec) Normalize(unset func(field string) bool) {
	if unset == nil {
		unset = func(string) bool { return true }
	}
	if p.Schema == "" {
		p.Schema = DefaultPostgresSchema
	}
	if p.Mode == "" {
		p.Mode = DefaultPostgresMode
	}
	if p.Retain == 0 && unset("retain") {
		p.Retain = DefaultRetain
	}
}

// Normalize fills the Parquet sink fields left out with their defaults
// (see RedisSinkSpec.Normalize for unset).
func (p *ParquetSinkSpec) Normalize(unset func(field string) bool) {
	if unset == nil {
		unset = func(string) bool { return true }
	}
	if p.Compression == "" {
		p.Compression = DefaultCompression
	}
	if p.Retain == 0 && unset("retain") {
		p.Retain = DefaultRetain
	}
}
