package parquet

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/precog-ml/precog/sources"
)

func TestTmpSlow(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "s.parquet")
	writeArrowFile(t, seed, 0, 40, 16)
	data, _ := os.ReadFile(seed)
	rng := rand.New(rand.NewPCG(3, 4))
	for it := 0; it < 300; it++ {
		d := append([]byte(nil), data...)
		for k := 0; k < 1+rng.IntN(4); k++ {
			d[rng.IntN(len(d))] = byte(rng.IntN(256))
		}
		p := filepath.Join(dir, "f.parquet")
		os.WriteFile(p, d, 0o644)
		done := make(chan string, 1)
		go func() {
			s, _ := New(p)
			ctx := context.Background()
			if _, err := s.Schema(ctx); err != nil { done <- "schema"; return }
			plans, err := s.Plan(ctx, 10)
			if err != nil { done <- "plan"; return }
			for _, sp := range plans[:min(len(plans), 20)] {
				r, err := s.Open(ctx, sp.Plan, sources.ReadOptions{BatchSize: 7})
				if err != nil { continue }
				for { rec, err := r.Next(ctx); if err != nil { break }; rec.Release() }
				r.Close()
			}
			done <- "ok"
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			os.WriteFile("/tmp/h3slow.parquet", d, 0o644)
			t.Fatalf("iteration %d hangs", it)
		}
	}
}
