package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// modelLoader loads a job's model and returns how to give it back.
type modelLoader func(spec jobs.ModelSpec, file string) (m *model.Model, release func(), err error)

// loadModel loads a model of its own, closed on release.
func loadModel(spec jobs.ModelSpec, file string) (*model.Model, func(), error) {
	m, err := model.Load(spec, file)
	if err != nil {
		return nil, nil, err
	}
	return m, func() { m.Close() }, nil
}

// modelCache keeps a worker's loaded models across runs, so that the next
// tick of a scheduled job or the next date of a backfill reuses the ONNX
// Runtime sessions instead of starting new ones. A model is shared when
// the file's content (SHA-256), the device and the model spec (bindings,
// threads, batch size) are the same. Entries are reference counted; those
// no open run uses are closed beyond max, least recently used first.
type modelCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]*modelEntry
	// hashes remembers each model file's SHA-256 by its identity on disk,
	// so that a run reusing a loaded model does not read the whole file
	// again; a file replaced or rewritten has another identity.
	hashes map[fileID]string
}

// fileID is a file's identity on disk as far as a rewrite changes it.
type fileID struct {
	path            string
	dev, ino        uint64
	size, mtimeNano int64
}

// maxHashes bounds modelCache.hashes; beyond it the memo starts over.
const maxHashes = 64

type modelEntry struct {
	key   string
	ready chan struct{} // closed once m or err is set
	m     *model.Model
	err   error
	refs  int
	used  time.Time
}

var modelLoads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "precog_worker_model_loads_total",
	Help: "Model acquisitions by a worker's model cache: hit (sessions reused across runs) or load (new sessions).",
}, []string{"result"})

func newModelCache(max int) *modelCache {
	return &modelCache{max: max, entries: map[string]*modelEntry{}, hashes: map[fileID]string{}}
}

// load implements modelLoader over the cache. Claim loops of several
// devices load their models concurrently; two wanting the same one wait
// for a single load.
func (c *modelCache) load(spec jobs.ModelSpec, file string) (*model.Model, func(), error) {
	key, err := c.modelKey(spec, file)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		e = &modelEntry{key: key, ready: make(chan struct{})}
		c.entries[key] = e
	}
	e.refs++
	c.mu.Unlock()
	if ok {
		<-e.ready
		modelLoads.WithLabelValues("hit").Inc()
	} else {
		e.m, e.err = model.Load(spec, file)
		close(e.ready)
		modelLoads.WithLabelValues("load").Inc()
	}
	if e.err != nil {
		c.mu.Lock()
		e.refs--
		if c.entries[key] == e {
			delete(c.entries, key) // the next run tries again
		}
		c.mu.Unlock()
		return nil, nil, e.err
	}
	var once sync.Once
	return e.m, func() { once.Do(func() { c.release(e) }) }, nil
}

func (c *modelCache) release(e *modelEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	e.used = time.Now()
	c.evict()
}

// evict closes the least recently used unreferenced models beyond max.
func (c *modelCache) evict() {
	evictLRU(c.entries, c.max, func(e *modelEntry) (time.Time, bool) { return e.used, e.refs == 0 }, (*modelEntry).close)
}

func (e *modelEntry) close() {
	if e.m != nil {
		e.m.Close()
	}
}

// closeAll closes every model; the cache must not be used after.
func (c *modelCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		e.close()
		delete(c.entries, k)
	}
}

// modelKey identifies a loaded model: the file's content hash, and the
// spec it was bound with (device included) and the job file its errors
// name.
func (c *modelCache) modelKey(spec jobs.ModelSpec, file string) (string, error) {
	// A model on object storage is hashed in the object cache, where a
	// worker fetches it once per version.
	local, err := objstore.LocalFile(context.Background(), spec.Path)
	if err != nil {
		return "", fmt.Errorf("model.path: %w", err)
	}
	sum, err := c.fileHash(local)
	if err != nil {
		return "", err
	}
	bound, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("model spec: %w", err)
	}
	return sum + "|" + file + "|" + string(bound), nil
}

// fileHash is the SHA-256 of the model file at path, read once per
// identity on disk (device, inode, size, modification time).
func (c *modelCache) fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("model.path: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("model.path: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("model.path: %s is not a regular file", path)
	}
	id := fileID{path: path, size: st.Size(), mtimeNano: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(sys.Dev), sys.Ino
	}
	c.mu.Lock()
	sum, ok := c.hashes[id]
	c.mu.Unlock()
	if ok {
		return sum, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("model.path: %s: %w", path, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	if len(c.hashes) >= maxHashes {
		clear(c.hashes)
	}
	c.hashes[id] = sum
	c.mu.Unlock()
	return sum, nil
}
