package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FileCache keeps local copies of objects that are read whole (models and
// tokenizers), so that a worker fetches each once: files are named by the
// SHA-256 of their content, an index maps (URL, ETag, size) to that name
// so that an unchanged object is not fetched again (even by the next
// process), and the least recently used files go beyond MaxBytes.
type FileCache struct {
	Dir      string
	MaxBytes int64

	mu       sync.Mutex
	fetching map[string]*fetchCall
}

type fetchCall struct {
	done chan struct{}
	path string
	err  error
}

// Cache defaults; PRECOG_OBJECT_CACHE_DIR and PRECOG_OBJECT_CACHE_MAX_BYTES
// override them.
const (
	DefaultCacheMaxBytes = 20 << 30
	// maxObjectBytes bounds one fetched file.
	maxObjectBytes = 16 << 30
)

var (
	defaultCacheOnce sync.Once
	defaultCache     *FileCache
	defaultCacheErr  error
)

// DefaultCache is the process's cache: $PRECOG_OBJECT_CACHE_DIR, else
// precog/objects under the user's cache directory, holding at most
// $PRECOG_OBJECT_CACHE_MAX_BYTES (default 20 GiB).
func DefaultCache() (*FileCache, error) {
	defaultCacheOnce.Do(func() {
		dir := os.Getenv("PRECOG_OBJECT_CACHE_DIR")
		if dir == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				base = os.TempDir()
			}
			dir = filepath.Join(base, "precog", "objects")
		}
		max := int64(DefaultCacheMaxBytes)
		if v := os.Getenv("PRECOG_OBJECT_CACHE_MAX_BYTES"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				defaultCacheErr = fmt.Errorf("PRECOG_OBJECT_CACHE_MAX_BYTES=%q: want a positive number of bytes", v)
				return
			}
			max = n
		}
		defaultCache = &FileCache{Dir: dir, MaxBytes: max}
	})
	return defaultCache, defaultCacheErr
}

// LocalFile returns a local path holding p: p itself when it is a local
// path, else the cached copy of the object it names, fetched when the
// cache has no copy of its current version.
func LocalFile(ctx context.Context, p string) (string, error) {
	if !IsURL(p) {
		return p, nil
	}
	c, err := DefaultCache()
	if err != nil {
		return "", err
	}
	return c.Fetch(ctx, p)
}

// Fetch returns the local copy of the object at url, fetching it when its
// current version (ETag and size) is not cached. Concurrent calls for one
// URL share one fetch.
func (c *FileCache) Fetch(ctx context.Context, url string) (string, error) {
	c.mu.Lock()
	if c.fetching == nil {
		c.fetching = map[string]*fetchCall{}
	}
	if call, ok := c.fetching[url]; ok {
		c.mu.Unlock()
		select {
		case <-call.done:
			return call.path, call.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	call := &fetchCall{done: make(chan struct{})}
	c.fetching[url] = call
	c.mu.Unlock()
	call.path, call.err = c.fetch(ctx, url)
	close(call.done)
	c.mu.Lock()
	delete(c.fetching, url)
	c.mu.Unlock()
	return call.path, call.err
}

func (c *FileCache) fetch(ctx context.Context, url string) (string, error) {
	loc, err := Parse(url)
	if err != nil {
		return "", err
	}
	if HasGlob(loc.Key) || loc.Key == "" || strings.HasSuffix(loc.Key, "/") {
		return "", fmt.Errorf("%s: names no single object", url)
	}
	b, err := Open(ctx, loc)
	if err != nil {
		return "", err
	}
	a, err := b.Attributes(ctx, loc.Key)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "index"), 0o755); err != nil {
		return "", fmt.Errorf("object cache: %w", err)
	}
	idx := filepath.Join(c.Dir, "index", hashString(loc.ObjectURL(loc.Key)+"\x00"+a.ETag+"\x00"+strconv.FormatInt(a.Size, 10)))
	if sum, err := os.ReadFile(idx); err == nil && a.ETag != "" {
		p := filepath.Join(c.Dir, strings.TrimSpace(string(sum)))
		if st, err := os.Stat(p); err == nil && st.Size() == a.Size {
			now := time.Now()
			_ = os.Chtimes(p, now, now) // recently used
			return p, nil
		}
	}
	if a.Size > c.MaxBytes || a.Size > maxObjectBytes {
		return "", fmt.Errorf("%s: %d bytes, over the object cache's limit of %d (PRECOG_OBJECT_CACHE_MAX_BYTES)", url, a.Size, min(c.MaxBytes, maxObjectBytes))
	}
	tmp, err := os.CreateTemp(c.Dir, ".fetch-*")
	if err != nil {
		return "", fmt.Errorf("object cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := b.Download(ctx, loc.Key, io.MultiWriter(tmp, h), min(c.MaxBytes, maxObjectBytes)); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("object cache: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	p := filepath.Join(c.Dir, sum)
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", fmt.Errorf("object cache: %w", err)
	}
	if err := writeFileAtomic(idx, []byte(sum)); err != nil {
		return "", err
	}
	c.evict(p)
	return p, nil
}

func hashString(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".idx-*")
	if err != nil {
		return fmt.Errorf("object cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("object cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("object cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("object cache: %w", err)
	}
	return nil
}

// evict removes the least recently used cached files (by modification
// time, refreshed on every hit) until the cache holds at most MaxBytes,
// keeping keep. Index entries of removed files are found stale on use.
func (c *FileCache) evict(keep string) {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{filepath.Join(c.Dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	for _, f := range files {
		if total <= c.MaxBytes {
			return
		}
		if f.path == keep {
			continue
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, os.ErrNotExist) {
			total -= f.size
		}
	}
}
