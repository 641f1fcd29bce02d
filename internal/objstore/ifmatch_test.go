package objstore

import (
	"bytes"
	"context"
	"testing"
)

// WriteIfMatch replaces an object only while its ETag is the one given
// (S3's If-Match, honoured by the real server): the ETag Download read
// wins once, the same ETag after that replacement is PreconditionFailed,
// and a deleted key is NotFound.
func TestWriteIfMatch(t *testing.T) {
	t.Parallel()
	_, b := openTestBucket(t)
	ctx := context.Background()
	if !b.CanWriteIfMatch() {
		t.Fatal("an s3:// bucket cannot replace conditionally")
	}
	if err := b.Write(ctx, "k", bytes.NewReader([]byte("a")), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	a, err := b.Download(ctx, "k", &buf, 10)
	if err != nil || a.ETag == "" {
		t.Fatalf("Download: ETag %q, %v", a.ETag, err)
	}
	etag, err := b.WriteIfMatch(ctx, "k", []byte("b"), a.ETag, "text/plain")
	if err != nil || etag == "" || etag == a.ETag {
		t.Fatalf("WriteIfMatch on the ETag read: %q, %v", etag, err)
	}
	if _, err := b.WriteIfMatch(ctx, "k", []byte("c"), a.ETag, "text/plain"); !PreconditionFailed(err) {
		t.Fatalf("WriteIfMatch on a replaced ETag: %v, want PreconditionFailed", err)
	}
	if got, err := b.ReadAll(ctx, "k", 10); err != nil || string(got) != "b" {
		t.Fatalf("content %q, %v, want b", got, err)
	}
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteIfMatch(ctx, "k", []byte("d"), etag, "text/plain"); !NotFound(err) {
		t.Fatalf("WriteIfMatch on a deleted key: %v, want NotFound", err)
	}
}
