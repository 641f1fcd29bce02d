package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fetched object is kept under its content hash and fetched again only
// when it changes; the cache stays under its size limit, least recently
// used first; an object over the limit is refused.
func TestFileCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, b := openTestBucket(t)
	put := func(key, body string) {
		t.Helper()
		if err := b.Write(ctx, key, strings.NewReader(body), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := &FileCache{Dir: t.TempDir(), MaxBytes: 250}
	fetch := func(key string) string {
		t.Helper()
		p, err := c.Fetch(ctx, srv.URL(key))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	body := strings.Repeat("m", 100)
	put("models/a.onnx", body)
	p := fetch("models/a.onnx")
	sum := sha256.Sum256([]byte(body))
	if filepath.Base(p) != hex.EncodeToString(sum[:]) {
		t.Fatalf("cached as %s, want its content hash", filepath.Base(p))
	}
	before := FetchedBytesWhole()
	if again := fetch("models/a.onnx"); again != p || FetchedBytesWhole() != before {
		t.Fatalf("second fetch: %s (first %s), %d bytes downloaded", again, p, FetchedBytesWhole()-before)
	}
	put("models/a.onnx", strings.Repeat("n", 100)) // a new version
	if p2 := fetch("models/a.onnx"); p2 == p {
		t.Fatal("a changed object was served from the cache")
	}
	put("models/b.onnx", strings.Repeat("b", 100))
	fetch("models/b.onnx") // 300 bytes in all: the oldest goes
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("least recently used file kept past the limit: %v", err)
	}
	put("models/big.onnx", strings.Repeat("x", 300))
	if _, err := c.Fetch(ctx, srv.URL("models/big.onnx")); err == nil || !strings.Contains(err.Error(), "over the object cache's limit") {
		t.Fatalf("object over the limit: %v", err)
	}
	if _, err := c.Fetch(ctx, srv.URL("models/*.onnx")); err == nil {
		t.Fatal("a glob was fetched")
	}
}
