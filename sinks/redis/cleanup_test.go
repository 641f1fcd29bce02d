package redis

import (
	"context"
	"fmt"
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
	// Without ScanUnindexed, a version without record or markers costs
	// one round trip and nothing is scanned.
	c.ConfigResetStat(ctx)
	if n, err := s.deleteVersion(ctx, "v2"); err != nil || n != 0 {
		t.Fatalf("deleteVersion(v2) without ScanUnindexed = %d, %v; want 0 keys, no error", n, err)
	}
	if calls := commandCalls(t, c); calls["scan"] != 0 || calls["exists"] != 2 || calls["unlink"] != 0 {
		t.Fatalf("deleting an unrecorded version unasked took commands %v, want the two EXISTS alone", calls)
	}
	if c.DBSize(ctx).Val() != 200_000+1000 {
		t.Fatalf("DBSIZE %d after an unasked delete of v2, want its keys left (%d)", c.DBSize(ctx).Val(), 200_000+1000)
	}
	s.ScanUnindexed(true)
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

// populate fills the private server's DB with n keys of another
// application (DEBUG POPULATE: "other:0" … in one command).
func populate(t testing.TB, c *goredis.Client, n int) {
	t.Helper()
	// A million keys take the server seconds on a busy machine: the command
	// gets a connection without the client's 3s read timeout, bounded by a
	// deadline no machine needs instead.
	opts := *c.Options()
	opts.ReadTimeout = -1
	slow := goredis.NewClient(&opts)
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := slow.Do(ctx, "DEBUG", "POPULATE", n, "other").Err(); err != nil {
		t.Fatalf("DEBUG POPULATE %d: %v", n, err)
	}
}

// connectionSetup are the commands of the test's own reads and of opening
// a connection, left out of serverTime.
var connectionSetup = map[string]bool{"config|resetstat": true, "info": true, "hello": true, "client|setname": true, "ping": true}

// serverTime is the total calls and microseconds Redis spent on commands
// since the last CONFIG RESETSTAT (INFO commandstats), by its own clock,
// connection setup left out:
// what an abort cost the server, whatever the load of the test machine.
func serverTime(t testing.TB, c *goredis.Client) (calls int64, spent time.Duration) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || connectionSetup[strings.TrimPrefix(name, "cmdstat_")] {
			continue
		}
		var n, usec int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(rest, ",", " "), "%d usec=%d", &n, &usec); err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		calls += n
		spent += time.Duration(usec) * time.Microsecond
	}
	return calls, spent
}

// TestAbortAmongAMillionKeys: among 1,000,000 keys of another
// application, aborting a run that never wrote (a cancelled pending run)
// is one round trip of four commands, and aborting a run that wrote 3
// shards deletes exactly its keys with commands in proportion to them; no
// SCAN either way, well under a second of the server's time (issue 31.3:
// a pending run's cancel scanned the whole keyspace).
func TestAbortAmongAMillionKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := testservers.NewRedis(t, "--enable-debug-command", "local")
	c := rs.Client(t)
	s := newTestSink(t, rs, nil)
	const others = 1_000_000
	populate(t, c, others)

	c.ConfigResetStat(ctx)
	start := time.Now()
	if err := s.Abort(ctx, testRun("pending")); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	calls, spent := serverTime(t, c)
	if stats := commandCalls(t, c); stats["scan"] != 0 || calls > 4 {
		t.Fatalf("aborting a run that wrote nothing issued %d commands %v, want no SCAN and one round trip of at most 4", calls, stats)
	}
	t.Logf("abort of a run that wrote nothing among %d keys: %v (%d commands, %v in Redis)", others, took, calls, spent)

	run := testRun("wrote")
	if err := s.Prepare(ctx, run); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := writeShard(ctx, s, run, i, i*2000, (i+1)*2000, 500, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.DBSize(ctx).Val(); n != others+6000+2 {
		t.Fatalf("DBSIZE %d after writing, want %d others + 6000 records + key record and markers", n, others)
	}
	c.ConfigResetStat(ctx)
	start = time.Now()
	if err := s.Abort(ctx, run); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	calls, spent = serverTime(t, c)
	stats := commandCalls(t, c)
	if stats["scan"] != 0 || calls > 4+6+1+2 {
		t.Fatalf("aborting a 6,000-key run issued %d commands %v, want no SCAN and about 13 (4 reads, 6 GETRANGE/UNLINK batches, 2 bookkeeping UNLINKs)", calls, stats)
	}
	if spent > time.Second {
		t.Fatalf("aborting a 6,000-key run took Redis %v, want well under a second", spent)
	}
	if n := c.DBSize(ctx).Val(); n != others {
		t.Fatalf("DBSIZE %d after the abort, want the %d other keys alone", n, others)
	}
	if n := c.Exists(ctx, "other:0", "other:999999").Val(); n != 2 {
		t.Fatalf("other keys lost in the abort: %d of 2 sampled remain", n)
	}
	t.Logf("abort of a 6,000-key run among %d keys: %v (%d commands, %v in Redis)", others, took, calls, spent)
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
