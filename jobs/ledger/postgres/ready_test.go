package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs/ledger"
)

// roleDSN connects to pg's database as role (trust authentication).
func roleDSN(pg *testservers.PG, role string) string {
	u := url.URL{Scheme: "postgres", User: url.User(role), Host: fmt.Sprintf("%s:%d", pg.Host, pg.Port), Path: "/" + pg.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

// TestCheckClaim: a role that can only SELECT opens the ledger and reads
// it, but cannot claim; CheckClaim says so (naming the missing privileges)
// without claiming, as a real claim fails. Granted UPDATE, it may claim. A
// role whose sessions are read-only cannot claim either.
func TestCheckClaim(t *testing.T) {
	ctx := context.Background()
	pg := testservers.Postgres(t)
	owner := open(t, pg.DSN)
	defer owner.Close()
	if err := owner.CheckClaim(ctx); err != nil {
		t.Fatalf("the owner's CheckClaim = %v, want nil", err)
	}
	role := "precog_ro_" + pg.Database // roles are cluster-wide
	pg.Exec(t, `CREATE ROLE "`+role+`" LOGIN`)
	t.Cleanup(func() {
		pg.Exec(t, `DROP OWNED BY "`+role+`"`)
		pg.Exec(t, `DROP ROLE "`+role+`"`)
	})
	// CREATE on the schema: Open's migration step checks it even when the
	// schema is current (a role without it fails to start, visibly).
	pg.Exec(t, `GRANT USAGE, CREATE ON SCHEMA public TO "`+role+`"`)
	pg.Exec(t, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO "`+role+`"`)

	ro := open(t, roleDSN(pg, role))
	defer ro.Close()
	if _, err := ro.PoolLoad(ctx, ledger.DefaultPool); err != nil {
		t.Fatalf("the read-only role cannot read the pool's load: %v", err)
	}
	err := ro.CheckClaim(ctx)
	if !errors.Is(err, ErrCannotClaim) || !strings.Contains(err.Error(), "UPDATE on precog_runs") ||
		!strings.Contains(err.Error(), "UPDATE on precog_run_shards") || !strings.Contains(err.Error(), role) {
		t.Fatalf("CheckClaim of a SELECT-only role = %v; want ErrCannotClaim naming the role and the missing UPDATEs", err)
	}
	// The check matches reality: a claim fails for want of privileges.
	if _, _, err := ro.ClaimNext(ctx, ledger.ClaimNextParams{Pool: ledger.DefaultPool, Worker: "w", Lease: time.Minute}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("ClaimNext of a SELECT-only role = %v, want permission denied", err)
	}

	pg.Exec(t, `GRANT UPDATE ON precog_runs, precog_run_shards TO "`+role+`"`)
	if err := ro.CheckClaim(ctx); err != nil {
		t.Fatalf("CheckClaim after the grants = %v, want nil", err)
	}
	if _, _, err := ro.ClaimNext(ctx, ledger.ClaimNextParams{Pool: ledger.DefaultPool, Worker: "w", Lease: time.Minute}); !errors.Is(err, ledger.ErrNoShard) {
		t.Fatalf("ClaimNext after the grants = %v, want ErrNoShard", err)
	}

	// Sessions made read-only after the worker started (Open, which
	// migrates, refuses them): new connections cannot claim.
	pg.Exec(t, `ALTER ROLE "`+role+`" SET default_transaction_read_only = on`)
	ro.pool.Reset()
	if err := ro.CheckClaim(ctx); !errors.Is(err, ErrCannotClaim) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("CheckClaim of read-only sessions = %v, want ErrCannotClaim saying read-only", err)
	}
}
