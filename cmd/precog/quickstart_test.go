package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/precog-ml/precog/internal/testservers"
)

// TestClusterQuickstartScript runs docs/cluster.md's one-machine cluster
// walkthrough (scripts/cluster-quickstart.sh) against a fresh ledger
// database with this build: two workers, submit --wait, status, workers,
// rejects and the dashboard's workers page.
func TestClusterQuickstartScript(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("jq is not installed (make test installs it: scripts/install-servers.sh)")
		}
		t.Skip("jq not installed (make test installs it)")
	}
	pg := testservers.Postgres(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "..", "scripts", "cluster-quickstart.sh"))
	cmd.Env = append(os.Environ(), "PRECOG="+precogBin, "PRECOG_DATABASE_URL="+pg.DSN, "QUICKSTART_DIR="+t.TempDir(),
		"QUICKSTART_DATA="+fixtures, "QUICKSTART_DASH_PORT="+strconv.Itoa(port))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/cluster-quickstart.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
