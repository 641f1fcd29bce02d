package model

import (
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// TestBatchRowsByDevice: a model whose spec leaves batch_size out runs
// 1024-row calls on a CPU and, on a GPU, one call per pipeline unit
// (jobs.DefaultGPUBatchSize) cut by the bytes of its input rows; a text
// model keeps its token-sized buckets of at most 1024 rows; a set batch
// size is kept on every device. (No GPU here: the device's choice is
// resolved again with the spec's device switched, as a worker's
// --devices does before a load.)
func TestBatchRowsByDevice(t *testing.T) {
	heavy := loadModel(t, specFor(t, "heavy"))
	if got := heavy.BatchRows(); got != jobs.DefaultBatchSize {
		t.Errorf("heavy on the CPU, batch_size left out: BatchRows %d, want %d", got, jobs.DefaultBatchSize)
	}
	if got, want := heavy.inputRowBytes(), 16*4; got != want {
		t.Errorf("heavy's input row: %d bytes, want %d (16 float32 features)", got, want)
	}
	heavy.spec.Device = "cuda:0"
	if got := heavy.resolveBatch(); got != jobs.DefaultGPUBatchSize {
		t.Errorf("heavy on a GPU, batch_size left out: %d rows a call, want %d", got, jobs.DefaultGPUBatchSize)
	}
	set := specFor(t, "ranker")
	set.BatchSize = 300
	ranker := loadModel(t, set)
	ranker.spec.Device = "cuda:0"
	if got := ranker.resolveBatch(); got != 300 {
		t.Errorf("ranker on a GPU with batch_size 300: %d rows a call", got)
	}
	spec, _, _ := textSpec(t, jobs.PoolingMean, jobs.NormalizeL2, 64)
	text := loadModel(t, spec)
	text.spec.Device = "cuda:0"
	if got := text.resolveBatch(); got != bucketRows {
		t.Errorf("a text model on a GPU, batch_size left out: %d rows a call, want its buckets' %d", got, bucketRows)
	}
}
