package model

// BucketRows is the rows of one length bucket of a text model's Infer,
// exported for the bench harness: its raw ONNX Runtime baseline cuts the
// same buckets.
const BucketRows = bucketRows

// PadBucketsTo pads every length bucket of a text model's Infer to at
// least n tokens (0, the default: each bucket to its own longest row). Only
// the bench harness calls it, for the padding-to-max_length baseline that
// length bucketing is measured against; call it before the model is used.
func (m *Model) PadBucketsTo(n int) { m.padTo = max(n, 0) }
