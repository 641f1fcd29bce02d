package bolt

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
)

// TestMain lets the test binary act as a second precog process.
func TestMain(m *testing.M) {
	if path := os.Getenv("PRECOG_BOLT_CHILD"); path != "" {
		child(path)
		return
	}
	os.Exit(m.Run())
}

// child commits one shard, says so, then waits to be killed.
func child(path string) {
	ctx := context.Background()
	l, err := Open(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := l.CreateRun(ctx, jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}, {Index: 1}}); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	s, err := l.Claim(ctx, "r1", "child", time.Minute)
	if err == nil {
		err = l.Complete(ctx, ledger.CompleteParams{RunID: "r1", Shard: s.Index, Worker: "child", Counts: jobs.Counts{RowsOut: 42}})
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("done")
	time.Sleep(time.Hour)
}

// TestKillAfterComplete: a kill -9 right after Complete returned loses
// nothing, and while the other process lives with the ledger open this one
// shares it (reads its commit, creates a run of another job).
func TestKillAfterComplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".precog", "ledger.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PRECOG_BOLT_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "done" {
		t.Fatalf("child said %q, %v", line, err)
	}
	// While the child lives with the ledger open, this process shares it:
	// it sees the child's commit and records its own run.
	shared, err := Open(path)
	if err != nil {
		t.Fatalf("Open while the child has the ledger open: %v", err)
	}
	if r, err := shared.Run(context.Background(), "r1"); err != nil || r.Counts.RowsOut != 42 {
		t.Fatalf("the child's run seen from this process = %+v, %v; want RowsOut 42", r.Counts, err)
	}
	if err := shared.CreateRun(context.Background(), jobs.Run{ID: "r2", Job: "scores"}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatalf("CreateRun of another job while the child has the ledger open: %v", err)
	}
	shared.Close()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open after the child was killed: %v", err)
	}
	defer l.Close()
	ss, err := l.Shards(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if ss[0].State != jobs.ShardCommitted || ss[0].Counts.RowsOut != 42 {
		t.Fatalf("shard 0 after kill -9 = %+v, want committed with 42 rows", ss[0])
	}
	if r, err := l.Run(context.Background(), "r1"); err != nil || r.Counts.RowsOut != 42 {
		t.Fatalf("run after kill -9 = %+v, %v; want RowsOut 42", r.Counts, err)
	}
}
