// Package runner executes shards: read → encode → infer → write as overlapped
// stages with bounded queues, committed shard by shard through the ledger so
// that a killed run resumes where it stopped.
package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/sinks"
	pqsink "github.com/precog-ml/precog/sinks/parquet"
	pgsink "github.com/precog-ml/precog/sinks/postgres"
	redissink "github.com/precog-ml/precog/sinks/redis"
	"github.com/precog-ml/precog/sources"
	pqsource "github.com/precog-ml/precog/sources/parquet"
	pgsource "github.com/precog-ml/precog/sources/postgres"
)

// Job is a spec with everything it needs opened and checked against each
// other: the source's schema, the model's I/O and the sinks. Building a Job
// reads metadata only, never data, so `precog validate` uses it too.
type Job struct {
	Spec   *jobs.Spec
	Source sources.Source
	Schema *arrow.Schema
	Model  *model.Model
	// Output is the schema of the records every sink receives.
	Output *arrow.Schema
	// keyIndex is the key column's index in Schema.
	keyIndex int
	// releaseModel gives the model back: closes it, or returns it to a
	// worker's model cache.
	releaseModel func()
}

// OpenJob opens the source and the model and checks them against each other
// and against the spec: key column, input columns and types, output names.
func OpenJob(ctx context.Context, spec *jobs.Spec) (*Job, error) {
	return openJob(ctx, spec, loadModel)
}

// openJob is OpenJob with the model from load (a worker's cache).
func openJob(ctx context.Context, spec *jobs.Spec, load modelLoader) (*Job, error) {
	src, err := OpenSource(ctx, spec)
	if err != nil {
		return nil, err
	}
	schema, err := src.Schema(ctx)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	keyIdx, err := checkKey(schema, spec.Source.Key)
	if err != nil {
		return nil, err
	}
	m, release, err := load(spec.Model, spec.File)
	if err != nil {
		return nil, err
	}
	if err := m.CheckSchema(schema); err != nil {
		release()
		return nil, err
	}
	j := &Job{Spec: spec, Source: src, Schema: schema, Model: m, keyIndex: keyIdx, releaseModel: release}
	j.Output = outputSchema(schema.Field(keyIdx), m.OutputFields(), spec.ParamNames())
	return j, nil
}

// Close releases the model's sessions (or gives them back to the worker's
// model cache).
func (j *Job) Close() error {
	if j.releaseModel != nil {
		j.releaseModel()
	}
	return nil
}

// Columns is the projection a shard read needs: the key and every input column.
func (j *Job) Columns() []string {
	cols := []string{j.Spec.Source.Key}
	for _, c := range j.Model.InputColumns() {
		if c != j.Spec.Source.Key {
			cols = append(cols, c)
		}
	}
	return cols
}

// OpenSource builds the spec's source.
func OpenSource(ctx context.Context, spec *jobs.Spec) (sources.Source, error) {
	switch {
	case spec.Source.Parquet != nil:
		s, err := pqsource.New(spec.Source.Parquet.Path)
		if err != nil {
			return nil, fmt.Errorf("source.parquet.path: %w", err)
		}
		return s, nil
	case spec.Source.Postgres != nil:
		s, err := pgsource.New(ctx, *spec.Source.Postgres, pgsource.WithKey(spec.Source.Key))
		if err != nil {
			return nil, fmt.Errorf("source.postgres: %w", err)
		}
		return s, nil
	}
	return nil, errors.New("source: no source configured")
}

// OpenSinks builds the spec's sinks, in the fixed order parquet, postgres,
// redis (Redis last: it is what applications read, so it publishes last).
func OpenSinks(ctx context.Context, spec *jobs.Spec) ([]sinks.Sink, error) {
	var out []sinks.Sink
	fail := func(err error) ([]sinks.Sink, error) {
		for _, s := range out {
			s.Close()
		}
		return nil, err
	}
	if spec.Sinks.Parquet != nil {
		var s sinks.Sink
		var err error
		if jobs.IsURL(spec.Sinks.Parquet.Path) {
			s, err = pqsink.NewObject(spec.Name, *spec.Sinks.Parquet)
		} else {
			s, err = pqsink.New(spec.Name, *spec.Sinks.Parquet)
		}
		if err != nil {
			return fail(fmt.Errorf("sinks.parquet: %w", err))
		}
		out = append(out, s)
	}
	if spec.Sinks.Postgres != nil {
		s, err := pgsink.New(ctx, spec.Name, *spec.Sinks.Postgres)
		if err != nil {
			return fail(fmt.Errorf("sinks.postgres: %w", err))
		}
		out = append(out, s)
	}
	if spec.Sinks.Redis != nil {
		s, err := redissink.New(*spec.Sinks.Redis)
		if err != nil {
			return fail(fmt.Errorf("sinks.redis: %w", err))
		}
		out = append(out, s)
	}
	return out, nil
}

func checkKey(schema *arrow.Schema, key string) (int, error) {
	idx := schema.FieldIndices(key)
	if len(idx) == 0 {
		names := make([]string, 0, schema.NumFields())
		for _, f := range schema.Fields() {
			names = append(names, f.Name)
		}
		return 0, fmt.Errorf("source.key: column %q not in source schema (have: %s)", key, strings.Join(names, ", "))
	}
	f := schema.Field(idx[0])
	switch f.Type.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.STRING_VIEW,
		arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return idx[0], nil
	}
	return 0, fmt.Errorf("source.key: column %q has type %s; a key must be a string or an integer", key, f.Type)
}

// outputSchema is what every sink receives: the key (string or int64), one
// field per model output, model_version, computed_at, then the run params.
func outputSchema(key arrow.Field, outputs []arrow.Field, params []string) *arrow.Schema {
	keyType := arrow.DataType(arrow.PrimitiveTypes.Int64)
	switch key.Type.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.STRING_VIEW:
		keyType = arrow.BinaryTypes.String
	}
	fields := []arrow.Field{{Name: key.Name, Type: keyType}}
	fields = append(fields, outputs...)
	fields = append(fields, jobs.OutputTail()...)
	for _, p := range params {
		fields = append(fields, arrow.Field{Name: p, Type: arrow.BinaryTypes.String})
	}
	return arrow.NewSchema(fields, nil)
}
