package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/precog-ml/precog/sinks"
)

// nodeStates reads run_id (INFO server) and evicted_keys (INFO stats) of
// the server, or of every master of a cluster, sorted by address.
func (s *Sink) nodeStates(ctx context.Context) ([]NodeState, error) {
	var out []NodeState
	err := s.retryDo(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.readNodeStates(ctx)
		return err
	})
	if err != nil {
		return nil, s.cfg.sanitize("INFO server stats", err)
	}
	return out, nil
}

func (s *Sink) readNodeStates(ctx context.Context) ([]NodeState, error) {
	var mu sync.Mutex
	var out []NodeState
	read := func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "server", "stats").Result()
		if err != nil {
			return err
		}
		st, err := parseNodeState(c.Options().Addr, info)
		if err != nil {
			return err
		}
		mu.Lock()
		out = append(out, st)
		mu.Unlock()
		return nil
	}
	err := s.forEachMaster(ctx, read)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// parseNodeState takes run_id and evicted_keys from an INFO reply.
func parseNodeState(addr, info string) (NodeState, error) {
	st := NodeState{Addr: addr, Evicted: -1}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			st.RunID = v
		case "evicted_keys":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return st, fmt.Errorf("INFO on %s: evicted_keys %q: %w", addr, v, err)
			}
			st.Evicted = n
		}
	}
	if st.RunID == "" || st.Evicted < 0 {
		return st, fmt.Errorf("INFO on %s lacks run_id or evicted_keys", addr)
	}
	return st, nil
}

// Stage is phase one of the publish: it checks that every committed shard
// left its commit marker with the row count the ledger recorded, and that
// no server holding the run's keys restarted (run_id changed: a restart
// without persistence, or a failover, may have lost them) or evicted keys
// (evicted_keys grew; Redis does not say which keys, so every shard that
// started before an eviction is suspect) since the shard started writing.
// Any of these is a *sinks.MissingError listing every affected shard, with
// the reasons, so that the runner recomputes them. Stage also confirms that
// Redis answers, so that Publish is a single SET. Nothing becomes visible.
//
// With publish: in_place the same checks run on the markers, but records
// live at {ns}:{key} without a version: Stage cannot tell a record of this
// run from an older one of the same key, so a lost key whose previous
// value survives elsewhere (a replica promoted) reads as an old value.
//
// In a cluster the markers record every master's state at shard start and
// Stage compares master by address: a master that is no longer one (a
// failover or resharding) counts as a restart for every shard that saw it.
func (s *Sink) Stage(ctx context.Context, run sinks.RunInfo, committed []sinks.CommittedShard) error {
	if s.isClosed.Load() {
		return fmt.Errorf("redis sink %s: stage after Close", s.cfg.where())
	}
	if err := s.checkRun(run); err != nil {
		return err
	}
	markers, err := s.readMarkers(ctx, run.Version, committed)
	if err != nil {
		return err
	}
	now, err := s.nodeStates(ctx)
	if err != nil {
		return fmt.Errorf("stage run %s: %w", run.RunID, err)
	}
	reasons := map[string][]int{}
	for i, c := range committed {
		if r := checkMarker(markers[i], c, now); r != "" {
			reasons[r] = append(reasons[r], c.Index)
		}
	}
	if len(reasons) == 0 {
		s.log.Info("redis run staged", "version", run.Version, "shards", len(committed))
		return nil
	}
	return missingError(run, reasons)
}

// readMarkers returns the marker of each committed shard (nil when absent),
// in the order of committed.
func (s *Sink) readMarkers(ctx context.Context, version string, committed []sinks.CommittedShard) ([]*Marker, error) {
	key := s.layout.Shards(version)
	out := make([]*Marker, len(committed))
	const page = 1000
	for lo := 0; lo < len(committed); lo += page {
		hi := min(lo+page, len(committed))
		fields := make([]string, 0, hi-lo)
		for _, c := range committed[lo:hi] {
			fields = append(fields, ShardField(c.Index))
		}
		vals, err := s.client.HMGet(ctx, key, fields...).Result()
		if err != nil {
			return nil, s.cfg.sanitize("stage: read shard markers "+key, err)
		}
		for j, v := range vals {
			raw, ok := v.(string)
			if !ok {
				continue
			}
			var m Marker
			if err := json.Unmarshal([]byte(raw), &m); err != nil {
				return nil, fmt.Errorf("redis sink: stage: %s field %s: %w", key, fields[j], err)
			}
			out[lo+j] = &m
		}
	}
	return out, nil
}

// checkMarker returns why shard c cannot be trusted ("" when it can).
func checkMarker(m *Marker, c sinks.CommittedShard, now []NodeState) string {
	if m == nil {
		return "commit marker missing (a restart without persistence, an eviction, an expired TTL or a deletion)"
	}
	if m.Rows != c.Rows {
		return fmt.Sprintf("marker records %d rows, the ledger %d", m.Rows, c.Rows)
	}
	for _, was := range m.Nodes {
		i := slices.IndexFunc(now, func(n NodeState) bool { return n.Addr == was.Addr })
		switch {
		case i < 0:
			return fmt.Sprintf("server %s is no longer a master (failover or resharding) since the shard was written", was.Addr)
		case now[i].RunID != was.RunID:
			return fmt.Sprintf("server %s restarted since the shard was written (run_id %s, was %s); a restart without persistence loses keys",
				was.Addr, now[i].RunID, was.RunID)
		case now[i].Evicted > was.Evicted:
			return fmt.Sprintf("server %s evicted %d keys since the shard started (evicted_keys %d, was %d) and Redis does not say which; "+
				"set maxmemory-policy noeviction or give Redis more memory",
				was.Addr, now[i].Evicted-was.Evicted, now[i].Evicted, was.Evicted)
		}
	}
	return ""
}

// missingError lists every affected shard, with each reason and its shards.
func missingError(run sinks.RunInfo, reasons map[string][]int) error {
	var all []int
	var parts []string
	for r, shards := range reasons {
		slices.Sort(shards)
		all = append(all, shards...)
		parts = append(parts, fmt.Sprintf("%s (shards %v)", r, shards))
	}
	slices.Sort(all)
	sort.Strings(parts)
	return &sinks.MissingError{Sink: "redis", Shards: all,
		Reason: fmt.Sprintf("version %s: %s", run.Version, strings.Join(parts, "; "))}
}
