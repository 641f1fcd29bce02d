package model

// TextBucketEnds cuts rows of ascending token lengths into the buckets a
// text model's Infer runs on device with model.batch_size batchSize, and
// returns each bucket's end; exported for the bench harness, whose raw ONNX
// Runtime baseline cuts the same buckets.
func TextBucketEnds(sortedLens []int, device string, batchSize int) []int {
	m := &Model{}
	m.spec.Device, m.spec.BatchSize = device, batchSize
	return bucketEnds(sortedLens, m.bucketTokens(), m.bucketMaxRows())
}

// PadBucketsTo pads every length bucket of a text model's Infer to at
// least n tokens (0, the default: each bucket to its own longest row). Only
// the bench harness calls it, for the padding-to-max_length baseline that
// length bucketing is measured against; call it before the model is used.
func (m *Model) PadBucketsTo(n int) { m.padTo = max(n, 0) }
