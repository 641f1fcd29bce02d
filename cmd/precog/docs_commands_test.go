package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/docgen"
	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/internal/testservers"
)

// demoRows is the rows per date of the docs' demo data: small, as the
// commands' output is what is checked, not their speed.
const demoRows = 2000

// demo is what `make demo` leaves behind, laid out in a temporary
// directory the way the docs' commands expect it from the repository root:
// bin/precog, demo/ (models, data, jobs, recs-demo.yaml, serve-jobs), a
// private Redis and a Postgres database, and the demo job run once.
type demo struct {
	dir string
	env []string // REDIS_ADDR, DATABASE_URL, PRECOG_STATE_DIR, PATH…
	pg  *testservers.PG
	rd  *testservers.RedisServer
}

func newDemo(t *testing.T) *demo {
	t.Helper()
	d := &demo{dir: t.TempDir(), pg: testservers.Postgres(t), rd: testservers.NewRedis(t)}
	if err := symlink(precogBin, filepath.Join(d.dir, "bin", "precog")); err != nil {
		t.Fatal(err)
	}
	demoDir := filepath.Join(d.dir, "demo")
	if _, err := testgen.Generate(demoDir, testgen.GenerateOptions{RowsPerDate: demoRows, Dates: []string{"2026-11-01"}}); err != nil {
		t.Fatal(err)
	}
	job, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "demo-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeSpec(t, demoDir, "recs-demo.yaml", string(job))
	// As scripts/demo.sh serves it: the job in a directory of its own, with
	// the models and data beside it.
	writeSpec(t, demoDir, "serve-jobs/recs.yaml", string(job))
	for _, sub := range []string{"models", "data"} {
		if err := os.Symlink(filepath.Join(demoDir, sub), filepath.Join(demoDir, "serve-jobs", sub)); err != nil {
			t.Fatal(err)
		}
	}
	d.env = append(os.Environ(),
		"REDIS_ADDR="+d.rd.Addr,
		"DATABASE_URL="+d.pg.DSN,
		"PRECOG_STATE_DIR="+filepath.Join(d.dir, ".precog"),
		"PRECOG_DATABASE_URL=",
	)
	if out, err := d.sh(t, "bin/precog run demo/recs-demo.yaml --param date=2026-11-01"); err != nil {
		t.Fatalf("the demo's run: %v\n%s", err, out)
	}
	return d
}

// sh runs a shell script in the demo's directory under bash -euo pipefail,
// bounded by commandTimeout.
func (d *demo) sh(t *testing.T, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = d.dir
	cmd.Env = d.env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestDocsCommands runs every shell block of README.md and docs/ fenced as
// ```sh {run}, in page order, against the demo's files and real servers, so
// the paths and flags the docs show cannot go stale: a block fails the
// test when any of its commands exits non-zero (bash -euo pipefail). The
// blocks share one demo directory, as a reader's commands share demo/.
func TestDocsCommands(t *testing.T) {
	for _, tool := range []string{"redis-cli", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed (make servers installs it)", tool)
			}
			t.Skipf("%s not installed (make servers installs it)", tool)
		}
	}
	type block struct {
		page string
		docgen.Block
	}
	var blocks []block
	for _, page := range docPages(t) {
		for _, b := range docgen.Parse(readPage(t, page)).Blocks {
			if b.Run() {
				blocks = append(blocks, block{page, b})
			}
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("only %d runnable blocks in the docs: is the marker still ```sh {run}?", len(blocks))
	}
	d := newDemo(t)
	// Blocks that start a server listen on $ADDR (their default otherwise).
	d.env = append(d.env, "ADDR="+freeAddr(t))
	for _, b := range blocks {
		out, err := d.sh(t, b.Body)
		if err != nil {
			t.Errorf("%s:%d: the block failed (%v):\n%s\noutput:\n%s", b.page, b.Line, err, b.Body, out)
			continue
		}
		t.Logf("%s:%d:\n%s", b.page, b.Line, strings.TrimSpace(out))
	}
}
