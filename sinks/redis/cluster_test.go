package redis

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
)

// newCluster starts three private redis-servers in cluster mode, each
// owning a third of the slots, and waits until the cluster is ok.
func newCluster(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	const n = 3
	var addrs []string
	var clients []*goredis.Client
	for i := 0; i < n; i++ {
		rs := testservers.NewRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
		addrs = append(addrs, rs.Addr)
		clients = append(clients, rs.Client(t))
	}
	for i, c := range clients {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("ADDSLOTSRANGE on %s: %v", addrs[i], err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[0])
			p, _ := strconv.Atoi(port)
			if err := c.Do(ctx, "CLUSTER", "MEET", host, p).Err(); err != nil {
				t.Fatalf("CLUSTER MEET: %v", err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok after 20s: %v\n%s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addrs := newCluster(t)
	s, err := New(jobs.RedisSinkSpec{Addrs: addrs, Namespace: "recs", Retain: 1, TTL: jobs.Duration{Duration: time.Hour}, PipelineBatch: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cc := s.client.(*goredis.ClusterClient)
	for _, v := range []string{"v1", "v2"} {
		run := testRun(v)
		if err := s.Prepare(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := writeShard(ctx, s, run, 0, 0, 3000, 256, 2); err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	run := testRun("v2")
	if cur, _ := s.Current(ctx, run); cur != "v2" {
		t.Fatalf("current = %q", cur)
	}
	if vs, _ := s.Versions(ctx, run); !slices.Equal(vs, []string{"v2"}) {
		t.Fatalf("versions = %v", vs)
	}
	// Every record of v2 readable through the cluster; v1 deleted on every node.
	var mu sync.Mutex // ForEachMaster runs the callbacks concurrently
	perNode := map[string]int{}
	for i := 0; i < 3000; i++ {
		raw, err := cc.Get(ctx, RecordKey("recs", "v2", strconv.Itoa(i))).Result()
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		checkRecord(t, run, i, 2, raw)
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		v1, _, err := c.Scan(ctx, 0, "recs:v1:*", 10000).Result()
		if err != nil {
			return err
		}
		v2 := c.DBSize(ctx).Val()
		mu.Lock()
		perNode[c.Options().Addr] = int(v2)
		mu.Unlock()
		if len(v1) != 0 {
			t.Errorf("node %s still has %d keys of v1", c.Options().Addr, len(v1))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(perNode) != 3 {
		t.Fatalf("records on %d nodes, want 3: %v", len(perNode), perNode)
	}
	for a, n := range perNode {
		if n < 500 {
			t.Fatalf("node %s holds only %d keys: records not spread (%v)", a, n, perNode)
		}
	}
	// Abort of an unpublished run deletes on every master.
	run3 := testRun("v3")
	if err := writeShard(ctx, s, run3, 0, 0, 500, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, run3); err != nil {
		t.Fatal(err)
	}
	var left int
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		ks, _, _ := c.Scan(ctx, 0, "recs:v3:*", 10000).Result()
		mu.Lock()
		left += len(ks)
		mu.Unlock()
		return nil
	})
	if left != 0 {
		t.Fatalf("%d keys of the aborted run remain", left)
	}
}
