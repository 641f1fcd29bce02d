package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/sinks"
)

// RollbackParams name what a rollback moves and where to.
type RollbackParams struct {
	// Spec is the job (with its params) whose sinks are moved.
	Spec *jobs.Spec
	// Sinks, when set, replace the spec's sinks (tests); Rollback does not
	// close them. Otherwise Rollback opens the spec's.
	Sinks []sinks.Sink
	// To is the version to move to; "" is the newest retained version
	// older than the current one of the store applications read (Redis
	// when present).
	To string
	// Only names the sinks to move, leaving the others where they are;
	// empty: every sink of the job.
	Only []string
	// List only reads each store's current and retained versions.
	List bool
	// OpenLedger opens the ledger that says whether a run of the job is
	// publishing (nil ledger, nil error: none to ask). It is called once
	// every store's writer lock is held, and the ledger closed after.
	OpenLedger func(ctx context.Context) (ledger.Ledger, error)
}

// RollbackStore is one sink of a rollback and what it retains.
type RollbackStore struct {
	Name string
	// Current is the version readers see ("" when none).
	Current string
	// Versions are the retained published versions, newest first.
	Versions []string
	// Skipped says why the sink is not moved ("" when it is): not named by
	// Only, or (listing) it keeps no earlier versions.
	Skipped string

	rb sinks.Rollbacker
}

// Why a sink is skipped (RollbackStore.Skipped).
const (
	SkipNotNamed   = "not in --sinks"
	SkipNoVersions = "keeps no earlier versions"
)

// RollbackResult is what a rollback saw and did, in order: Stores (every
// sink, the skipped ones included), then the sinks Moved to Target, then
// those MovedBack after a failure. It is filled as far as the rollback
// got when it returns an error.
type RollbackResult struct {
	Stores []RollbackStore
	Target string
	// Moved are the sinks switched to Target, in order.
	Moved []RollbackStore
	// MovedBack are the sinks moved back to their Current after a failure.
	MovedBack []RollbackStore
}

// Rollback points readers of every sink (or those p.Only names) back at
// an earlier retained version, all or nothing: every store is checked to
// retain the target before any is changed, and when one fails those
// already moved are moved back. A request that cannot be done as asked
// (an unknown sink, a sink keeping no earlier versions, a version not
// retained) is a *RefusedError and nothing changes. Rollback holds every
// store's writer lock while it switches (a *sinks.LockedError when a run
// writes the target) and refuses while a run of the job is publishing.
func Rollback(ctx context.Context, p RollbackParams) (RollbackResult, error) {
	snks := p.Sinks
	if snks == nil {
		var err error
		if snks, err = OpenSinks(ctx, p.Spec); err != nil {
			return RollbackResult{}, refused(err)
		}
		defer func() {
			for _, s := range snks {
				s.Close()
			}
		}()
	}
	info := sinks.TargetInfo(p.Spec)
	res, err := rollbackStores(ctx, p, snks, info)
	if err != nil || p.List {
		return res, err
	}
	moving := res.moving()
	if res.Target, err = rollbackTarget(moving, p.To); err != nil {
		return res, err
	}
	// The publish is a critical section: hold every store's writer lock (a
	// publisher holds them from stage to cutover), then make sure no run
	// of this target is in its publish step.
	var rbSinks []sinks.Sink
	for _, s := range snks {
		if slices.ContainsFunc(moving, func(st RollbackStore) bool { return st.Name == s.Name() }) {
			rbSinks = append(rbSinks, s)
		}
	}
	lctx, release, err := lockForRollback(ctx, rbSinks, info)
	if err != nil {
		return res, err
	}
	defer release()
	if err := refuseWhilePublishing(lctx, p); err != nil {
		return res, err
	}
	return res, res.switchStores(lctx, moving, info)
}

// moving is the stores the rollback moves.
func (r *RollbackResult) moving() []RollbackStore {
	var out []RollbackStore
	for _, st := range r.Stores {
		if st.Skipped == "" {
			out = append(out, st)
		}
	}
	return out
}

// rollbackStores reads every sink's current and retained versions. A sink
// that keeps no earlier versions is refused unless Only leaves it out
// (with List, it is only said).
func rollbackStores(ctx context.Context, p RollbackParams, snks []sinks.Sink, info sinks.RunInfo) (RollbackResult, error) {
	var res RollbackResult
	names := make([]string, 0, len(snks))
	for _, s := range snks {
		names = append(names, s.Name())
	}
	for _, n := range p.Only {
		if !slices.Contains(names, n) {
			return res, refused(fmt.Errorf("--sinks: %q is not a sink of job %s (its sinks: %s)", n, p.Spec.Name, strings.Join(names, ", ")))
		}
	}
	moving := 0
	for _, s := range snks {
		st := RollbackStore{Name: s.Name()}
		if len(p.Only) > 0 && !slices.Contains(p.Only, s.Name()) {
			st.Skipped = SkipNotNamed
			res.Stores = append(res.Stores, st)
			continue
		}
		rb, ok := s.(sinks.Rollbacker)
		if !ok || !KeepsVersions(p.Spec, s.Name()) {
			if p.List {
				st.Skipped = SkipNoVersions
				res.Stores = append(res.Stores, st)
				continue
			}
			return res, refused(fmt.Errorf("sinks.%s keeps no earlier versions (postgres mode: upsert, redis publish: in_place), so a rollback would leave the stores on different versions; nothing was changed (name the sinks to move with --sinks to roll back the others anyway)", s.Name()))
		}
		var err error
		if st.Versions, err = rb.Versions(ctx, info); err != nil {
			return res, fmt.Errorf("sinks.%s: %w", s.Name(), err)
		}
		if st.Current, err = rb.Current(ctx, info); err != nil {
			return res, fmt.Errorf("sinks.%s: %w", s.Name(), err)
		}
		st.rb = rb
		res.Stores = append(res.Stores, st)
		moving++
	}
	if moving == 0 {
		return res, refused(errors.New("--sinks: no sink left to roll back"))
	}
	return res, nil
}

// rollbackTarget is to, or the version before the current one of the last
// store (the one applications read), checked to be retained by every store.
func rollbackTarget(stores []RollbackStore, to string) (string, error) {
	target := to
	if target == "" {
		st := stores[len(stores)-1]
		i := slices.Index(st.Versions, st.Current)
		if i < 0 || i+1 >= len(st.Versions) {
			return "", refused(fmt.Errorf("sinks.%s: no retained version older than the current %s (retained: %s); nothing was changed", st.Name, OrNone(st.Current), OrNone(strings.Join(st.Versions, ", "))))
		}
		target = st.Versions[i+1]
	}
	for _, st := range stores {
		if !slices.Contains(st.Versions, target) {
			return "", refused(fmt.Errorf("sinks.%s: version %s is not retained (retained: %s); nothing was changed (move only the other sinks with --sinks, leaving %s where it is)", st.Name, target, OrNone(strings.Join(st.Versions, ", ")), st.Name))
		}
	}
	return target, nil
}

// KeepsVersions reports whether the spec's sink named name keeps earlier
// published versions.
func KeepsVersions(spec *jobs.Spec, name string) bool {
	switch name {
	case "postgres":
		return spec.Sinks.Postgres.Mode != jobs.PostgresUpsert
	case "redis":
		return spec.Sinks.Redis.Publish != jobs.RedisPublishInPlace
	}
	return true
}

// switchStores moves every store to the target, in the sinks' order (Redis
// last). When one fails, those already moved are moved back to the
// version they had, so that the stores never end on different versions;
// the error says what happened.
func (r *RollbackResult) switchStores(ctx context.Context, stores []RollbackStore, info sinks.RunInfo) error {
	for _, st := range stores {
		if err := ctx.Err(); err != nil {
			return r.undo(info, fmt.Errorf("sinks.%s: not rolled back: %w", st.Name, context.Cause(ctx)))
		}
		if err := st.rb.Rollback(ctx, info, r.Target); err != nil {
			return r.undo(info, fmt.Errorf("sinks.%s: rollback to %s: %w", st.Name, r.Target, err))
		}
		r.Moved = append(r.Moved, st)
	}
	return nil
}

// undo moves the stores a failed rollback moved back to their version
// before it, and returns cause with what it did.
func (r *RollbackResult) undo(info sinks.RunInfo, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, st := range slices.Backward(r.Moved) {
		if st.Current == "" {
			continue
		}
		if err := st.rb.Rollback(ctx, info, st.Current); err != nil {
			errs = append(errs, fmt.Errorf("sinks.%s: could not move back to %s: %w", st.Name, st.Current, err))
			continue
		}
		r.MovedBack = append(r.MovedBack, st)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; undoing the sinks already moved failed, the stores may be on different versions: %w", cause, errors.Join(errs...))
	}
	if len(r.Moved) > 0 {
		return fmt.Errorf("%w; the sinks already moved were moved back", cause)
	}
	return fmt.Errorf("%w; nothing was changed", cause)
}

// OrNone is s, or "(none)" when empty: a version or list in a message.
func OrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// lockForRollback takes the writer lock of every sink it switches, as a
// holder of its own (a rollback is no run: it never takes over a run's
// lock). A target being written is a *sinks.LockedError naming the writer.
// The returned context is cancelled when any lock is lost (its lease
// lapsed or was taken over): the rollback stops before the next sink.
func lockForRollback(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo) (context.Context, func(), error) {
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	holderInfo := info
	holderInfo.RunID = "rollback-" + hex.EncodeToString(tok[:])
	lctx, release, err := LockSinks(ctx, snks, info, sinks.ThisProcess(holderInfo))
	if err != nil {
		return nil, nil, fmt.Errorf("a run is writing this target; nothing was changed (roll back once it finished): %w", err)
	}
	return lctx, release, nil
}

// refuseWhilePublishing fails when a run of the spec's job and params is
// in its publish step in the ledger: rolling back under it would leave the
// stores on different versions once it cuts over.
func refuseWhilePublishing(ctx context.Context, p RollbackParams) error {
	if p.OpenLedger == nil {
		return nil
	}
	led, err := p.OpenLedger(ctx)
	if err != nil || led == nil {
		return err
	}
	defer led.Close()
	run, err := led.OpenRun(ctx, p.Spec.Name, jobs.ParamsKey(p.Spec.Params))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil
	case err != nil:
		return err
	case run.State == jobs.RunPublishing:
		return fmt.Errorf("run %s of %s is publishing; nothing was changed (roll back once it finished, see precog status %s): %w", run.ID, p.Spec.Name, run.ID, ledger.ErrPublishing)
	}
	return nil
}
