package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// fillOther writes n keys of another application into the DB.
func fillOther(t testing.TB, c *goredis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 5000 {
		pipe := c.Pipeline()
		for i := lo; i < min(lo+5000, n); i++ {
			pipe.Set(ctx, "other:"+strconv.Itoa(i), "x", 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// commandCalls returns INFO commandstats calls by command name.
func commandCalls(t testing.TB, c *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestDeleteVersionCost: deleting a 1,000-key version in a DB of 200,000
// other keys reads the version's key record and UNLINKs what it lists: no
// SCAN, a handful of commands. The SCAN fallback (a version without a
// record) is timed against it.
func TestDeleteVersionCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t) // private: commandstats count only this test
	c := rs.Client(t)
	s := newTestSink(t, rs, nil)
	fillOther(t, c, 200_000)
	for _, v := range []string{"v1", "v2"} {
		run := testRun(v)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := writeShard(ctx, s, run, 0, 0, 1000, 250, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	// v2 loses its records, as if an older precog had written it.
	c.Unlink(ctx, s.layout.Keys("v2"), s.layout.Shards("v2"))
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := s.deleteVersion(ctx, "v1")
	recorded := time.Since(start)
	if err != nil || n != 1000 {
		t.Fatalf("deleteVersion(v1) = %d, %v; want 1000 keys", n, err)
	}
	calls := commandCalls(t, c)
	total := int64(0)
	for _, k := range []string{"scan", "unlink", "getrange", "exists"} {
		total += calls[k]
	}
	if calls["scan"] != 0 || calls["unlink"] > 3 || total > 10 {
		t.Fatalf("deleting a recorded 1,000-key version took commands %v, want no SCAN and about 5 commands", calls)
	}
	if c.DBSize(ctx).Val() != 200_000+1000 {
		t.Fatalf("DBSIZE %d after deleting v1, want the other keys and v2's records (%d)", c.DBSize(ctx).Val(), 200_000+1000)
	}
	c.ConfigResetStat(ctx)
	start = time.Now()
	n, err = s.deleteVersion(ctx, "v2")
	scanned := time.Since(start)
	if err != nil || n != 1000 {
		t.Fatalf("SCAN fallback deleteVersion(v2) = %d, %v; want 1000 keys", n, err)
	}
	scanCalls := commandCalls(t, c)["scan"]
	if c.DBSize(ctx).Val() != 200_000 {
		t.Fatalf("DBSIZE %d after deleting v2, want 200000", c.DBSize(ctx).Val())
	}
	t.Logf("1,000-key version among 200,000 keys: key record %v (%v commands), SCAN fallback %v (%d SCANs)",
		recorded, calls, scanned, scanCalls)
}

// TestCloseDoesNotWaitForCleanup: Close gives up on a slow cleanup after
// its bound, the version stays in {ns}:gc, and the next run's Prepare
// finishes the job.
func TestCloseDoesNotWaitForCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.Redis(t)
	c := rs.Client(t)
	s, err := New(jobs.RedisSinkSpec{Addr: rs.Addr, DB: rs.DB, Namespace: rs.Prefix, TTL: jobs.Duration{Duration: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	s.closeWait = time.Millisecond
	old := testRun("old")
	if err := writeShard(ctx, s, old, 0, 0, 20_000, 1000, 0); err != nil {
		t.Fatal(err)
	}
	c.SAdd(ctx, gcKey(rs.Prefix), "old")
	run := testRun("v1")
	if err := s.Prepare(ctx, run); err != nil { // starts the collector
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with a 1ms cleanup bound", d)
	}
	if !c.SIsMember(ctx, gcKey(rs.Prefix), "old").Val() {
		t.Fatal("the collector finished 20,000 deletions within the 1ms bound: nothing left to test")
	}
	s2 := newTestSink(t, rs, nil)
	if err := s2.Prepare(ctx, testRun("v2")); err != nil {
		t.Fatal(err)
	}
	if err := s2.WaitCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, c, rs.Prefix+":old:*")); n != 0 || c.SIsMember(ctx, gcKey(rs.Prefix), "old").Val() {
		t.Fatalf("%d keys of the collected version remain after the next run's cleanup", n)
	}
}
