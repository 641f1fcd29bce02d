package redis

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testservers.StopAll()
	if tlsCA.ca != "" {
		os.RemoveAll(filepath.Dir(tlsCA.ca))
	}
	os.Exit(code)
}

// testRun is a RunInfo over a recs-like schema: int64 key, a float32
// score, list<int64> items, list<float32> scores, model_version,
// computed_at and a date param.
func testRun(version string) sinks.RunInfo {
	fields := []arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
		{Name: "items", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "item_scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
		{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "date", Type: arrow.BinaryTypes.String},
	}
	return sinks.RunInfo{
		Job: "test", RunID: "run-" + version, Version: version,
		Params: map[string]string{"date": "2024-11-01"},
		Schema: arrow.NewSchema(fields, nil), Key: "user_id",
	}
}

var testComputedAt = time.Date(2024, 11, 1, 12, 30, 0, 123456000, time.UTC)

// rowScore is row i's score: a float32 whose shortest decimal form needs
// all of float32's digits, so a float64 formatting would not round-trip.
func rowScore(version string, i int) float32 {
	return float32(i)/3 + float32(len(version))*0.1
}

// testBatch builds rows [from, to) of run, with nItems list elements each.
func testBatch(run sinks.RunInfo, from, to, nItems int) arrow.RecordBatch {
	return testBatchWith(memory.DefaultAllocator, run, from, to, nItems)
}

// testBatchWith is testBatch with its buffers from mem.
func testBatchWith(mem memory.Allocator, run sinks.RunInfo, from, to, nItems int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, run.Schema)
	defer b.Release()
	for i := from; i < to; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Float32Builder).Append(rowScore(run.Version, i))
		items := b.Field(2).(*array.ListBuilder)
		items.Append(true)
		scores := b.Field(3).(*array.ListBuilder)
		scores.Append(true)
		for j := 0; j < nItems; j++ {
			items.ValueBuilder().(*array.Int64Builder).Append(int64(i*1000 + j))
			scores.ValueBuilder().(*array.Float32Builder).Append(1 / float32(j+i+1))
		}
		b.Field(4).(*array.StringBuilder).Append("model-" + run.Version)
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(testComputedAt.UnixMicro()))
		b.Field(6).(*array.StringBuilder).Append(run.Params["date"])
	}
	return b.NewRecordBatch()
}

// record is what a reader decodes from a stored value.
type record struct {
	Score        float32   `json:"score"`
	Items        []int64   `json:"items"`
	ItemScores   []float32 `json:"item_scores"`
	ModelVersion string    `json:"model_version"`
	ComputedAt   time.Time `json:"computed_at"`
	Date         string    `json:"date"`
}

// checkRecord asserts that raw is row i of run, exactly.
func checkRecord(t *testing.T, run sinks.RunInfo, i, nItems int, raw string) {
	t.Helper()
	var r record
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("row %d: %v in %s", i, err, raw)
	}
	if r.Score != rowScore(run.Version, i) {
		t.Fatalf("row %d: score %v, want %v (%s)", i, r.Score, rowScore(run.Version, i), raw)
	}
	if len(r.Items) != nItems || len(r.ItemScores) != nItems {
		t.Fatalf("row %d: %d items, %d scores, want %d", i, len(r.Items), len(r.ItemScores), nItems)
	}
	for j := 0; j < nItems; j++ {
		if r.Items[j] != int64(i*1000+j) || r.ItemScores[j] != 1/float32(j+i+1) {
			t.Fatalf("row %d item %d: %d %v", i, j, r.Items[j], r.ItemScores[j])
		}
	}
	if r.ModelVersion != "model-"+run.Version || !r.ComputedAt.Equal(testComputedAt) || r.Date != run.Params["date"] {
		t.Fatalf("row %d: meta fields %+v", i, r)
	}
}

// newTestSink returns a sink on the server's DB with a namespace unique
// to the test, closed at cleanup.
func newTestSink(t *testing.T, rs *testservers.RedisServer, mod func(*jobs.RedisSinkSpec)) *Sink {
	t.Helper()
	spec := jobs.RedisSinkSpec{
		Addr: rs.Addr, DB: rs.DB, Password: rs.Password, Namespace: rs.Prefix,
		TTL: jobs.Duration{Duration: time.Hour},
	}
	if mod != nil {
		mod(&spec)
	}
	s, err := New(spec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// writeShard writes rows [from, to) as one shard in batches of per rows.
func writeShard(ctx context.Context, s *Sink, run sinks.RunInfo, index, from, to, per, nItems int) error {
	w, err := s.Shard(ctx, run, index)
	if err != nil {
		return err
	}
	for lo := from; lo < to; lo += per {
		rec := testBatch(run, lo, min(lo+per, to), nItems)
		err := w.Write(ctx, rec)
		rec.Release()
		if err != nil {
			w.Abort(ctx)
			return err
		}
	}
	return w.Commit(ctx)
}

// readAll returns every key of the DB matching pattern → value.
func readAll(t *testing.T, c *goredis.Client, pattern string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		out[iter.Val()] = ""
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	for lo := 0; lo < len(keys); lo += 1000 {
		hi := min(lo+1000, len(keys))
		vals, err := c.MGet(ctx, keys[lo:hi]...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if v != nil {
				out[keys[lo+i]] = v.(string)
			}
		}
	}
	return out
}

// checkVersion asserts that exactly rows [0, n) of run are stored under
// the run's version, each with the right value.
func checkVersion(t *testing.T, c *goredis.Client, ns string, run sinks.RunInfo, n, nItems int) {
	t.Helper()
	got := readAll(t, c, ns+":"+run.Version+":*")
	if len(got) != n {
		t.Fatalf("version %s: %d keys, want %d", run.Version, len(got), n)
	}
	for i := 0; i < n; i++ {
		raw, ok := got[RecordKey(ns, run.Version, strconv.Itoa(i))]
		if !ok {
			t.Fatalf("version %s: row %d missing", run.Version, i)
		}
		checkRecord(t, run, i, nItems, raw)
	}
}

// vecRun is a RunInfo over an embedding schema: string key, a list<float32>
// vector (what the runner makes of an [N, dim] output), model_version and
// computed_at: the wide records of issue 24.
func vecRun(version string) sinks.RunInfo {
	fields := []arrow.Field{
		{Name: "item_id", Type: arrow.BinaryTypes.String},
		{Name: "vec", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: sinks.ColModelVersion, Type: arrow.BinaryTypes.String},
		{Name: sinks.ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}
	return sinks.RunInfo{
		Job: "test", RunID: "run-" + version, Version: version,
		Schema: arrow.NewSchema(fields, nil), Key: "item_id",
	}
}

// vecValue is element j of row i's vector: a deterministic, roughly
// normal-looking float32 whose shortest text needs 7 to 9 digits, like a
// model's embedding (e.g. -0.07983688).
func vecValue(i, j int) float32 {
	x := uint32(i*2654435761) ^ uint32(j*40503+1)
	x ^= x >> 15
	x *= 2246822519
	x ^= x >> 13
	return (float32(x%2000001) - 1e6) / 7.7e5
}

// vecBatch builds rows [from, to) of a vecRun with dim-element vectors.
func vecBatch(run sinks.RunInfo, from, to, dim int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, run.Schema)
	defer b.Release()
	for i := from; i < to; i++ {
		b.Field(0).(*array.StringBuilder).Append("item-" + strconv.Itoa(i))
		vec := b.Field(1).(*array.ListBuilder)
		vec.Append(true)
		vb := vec.ValueBuilder().(*array.Float32Builder)
		for j := 0; j < dim; j++ {
			vb.Append(vecValue(i, j))
		}
		b.Field(2).(*array.StringBuilder).Append("model-" + run.Version)
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(testComputedAt.UnixMicro()))
	}
	return b.NewRecordBatch()
}
