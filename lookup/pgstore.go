package lookup

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/precog-ml/precog/jobs"
)

// pgTable reads rows of one Postgres table or view by key: the job's output
// view (records) or its serving.features table (live inputs).
type pgTable struct {
	pool   *pgxpool.Pool
	schema string
	table  string
	key    string
	where  string // "schema.table", for errors
	brk    *breaker
	cold   coldStart

	mu      sync.Mutex
	intKey  bool
	resolve bool      // key type known
	load    *metaLoad // the key type's query while it runs, else nil
	waiting int       // requests waiting on load (tests wait on it)
}

// coldStart is the budget of a table's first (metadata) queries and where
// they run: off the request path, under the server's context, so that a
// slow first query on a loaded machine neither fails requests at the step
// timeout nor opens the breaker.
type coldStart struct {
	ctx     context.Context // the server's: ends at Close
	wg      *sync.WaitGroup
	timeout time.Duration
}

// metaLoad is one run of the key type's query; done closes when it ends.
type metaLoad struct {
	done   chan struct{}
	intKey bool
	err    error
}

func newPGTable(pool *pgxpool.Pool, schema, table, key string) *pgTable {
	if schema == "" {
		schema = jobs.DefaultPostgresSchema
	}
	return &pgTable{pool: pool, schema: schema, table: table, key: key, where: schema + "." + table}
}

func (t *pgTable) ident() string {
	return pgx.Identifier{t.schema, t.table}.Sanitize()
}

// keyIsInt finds (once) whether the key column is an integer, so that keys
// from URLs are compared with the column's own type and its index is used.
//
// The query is a cold-start query: it runs once, in the background, within
// the cold-start budget (not the request's step timeout), and its outcome
// alone counts for the breaker, once. A request waits for it within its
// own deadline; a request that gives up leaves it running for the next.
func (t *pgTable) keyIsInt(ctx context.Context) (bool, error) {
	t.mu.Lock()
	if t.resolve {
		t.mu.Unlock()
		return t.intKey, nil
	}
	l := t.load
	if l == nil {
		l = &metaLoad{done: make(chan struct{})}
		t.load = l
		t.cold.wg.Add(1)
		go t.loadKeyType(l)
	}
	t.waiting++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.waiting--
		t.mu.Unlock()
	}()
	select {
	case <-l.done:
		return l.intKey, l.err
	case <-ctx.Done():
		return false, fmt.Errorf("postgres %s: the key column's type is still being read (first query since start): %w", t.where, ctx.Err())
	}
}

// warm starts the key type's query at server start.
func (t *pgTable) warm() {
	_, _ = t.keyIsInt(canceled)
}

// canceled is a context that has ended: keyIsInt(canceled) starts the
// load without waiting for it.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// loadKeyType runs l: the key column's type, read from the relation the
// way rows reads it (the same permission, relation and column errors).
func (t *pgTable) loadKeyType(l *metaLoad) {
	defer t.cold.wg.Done()
	ctx, cancel := context.WithTimeout(t.cold.ctx, t.cold.timeout)
	defer cancel()
	l.intKey, l.err = t.queryKeyType(ctx)
	if l.err != nil && t.cold.ctx.Err() == nil {
		stepDone(t.cold.ctx, t.brk, l.err)
	} else if l.err == nil {
		t.brk.success()
	}
	if l.err != nil {
		// Waiters get the error once; the next request tries again.
		l.err = fmt.Errorf("%w%w", l.err, noFault)
	}
	t.mu.Lock()
	if l.err == nil {
		t.intKey, t.resolve = l.intKey, true
	}
	t.load = nil
	t.mu.Unlock()
	close(l.done)
}

func (t *pgTable) queryKeyType(ctx context.Context) (bool, error) {
	q := "SELECT " + pgx.Identifier{t.key}.Sanitize() + " FROM " + t.ident() + " LIMIT 0"
	rs, err := t.pool.Query(ctx, q)
	if err != nil {
		return false, fmt.Errorf("postgres %s: select %s: %w", t.where, t.key, err)
	}
	fds := rs.FieldDescriptions()
	var oid uint32
	if len(fds) == 1 {
		oid = fds[0].DataTypeOID
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return false, fmt.Errorf("postgres %s: select %s: %w", t.where, t.key, err)
	}
	switch oid {
	case pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID:
		return true, nil
	}
	return false, nil
}

// check reads no rows of the table the way rows reads it: the error a
// request would meet (permission denied for the view, no such relation, no
// such column, the server down), for /readyz.
func (t *pgTable) check(ctx context.Context) error {
	q := "SELECT " + pgx.Identifier{t.key}.Sanitize() + " FROM " + t.ident() + " LIMIT 0"
	rs, err := t.pool.Query(ctx, q)
	if err == nil {
		rs.Close()
		err = rs.Err()
	}
	if err != nil {
		return fmt.Errorf("postgres %s: select %s: %w", t.where, t.key, err)
	}
	return nil
}

// rows fetches the rows of keys (isInt: the key column is an integer, see
// keyIsInt). cols nil selects every column. When a key
// has several rows (upsert mode keeps one per run parameter set), the one
// with the latest computed_at wins if order is set.
func (t *pgTable) rows(ctx context.Context, isInt bool, keys []string, cols []string, order string) (map[string]map[string]any, error) {
	var arg any
	if isInt {
		ints := make([]int64, 0, len(keys))
		for _, k := range keys {
			if n, err := strconv.ParseInt(k, 10, 64); err == nil {
				ints = append(ints, n)
			}
		}
		if len(ints) == 0 {
			return map[string]map[string]any{}, nil
		}
		arg = ints
	} else {
		arg = keys
	}
	sel := "*"
	if cols != nil {
		sel = pgx.Identifier{t.key}.Sanitize()
		for _, c := range cols {
			sel += ", " + pgx.Identifier{c}.Sanitize()
		}
	}
	q := "SELECT " + sel + " FROM " + t.ident() + " WHERE " + pgx.Identifier{t.key}.Sanitize() + " = ANY($1)"
	if order != "" {
		q += " ORDER BY " + pgx.Identifier{order}.Sanitize() + " DESC"
	}
	rs, err := t.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: select by %s: %w", t.where, t.key, err)
	}
	defer rs.Close()
	fds := rs.FieldDescriptions()
	out := make(map[string]map[string]any, len(keys))
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, fmt.Errorf("postgres %s: read row: %w", t.where, err)
		}
		m := make(map[string]any, len(vals))
		var key string
		for i, fd := range fds {
			if fd.Name == t.key {
				key = fmt.Sprint(vals[i])
				continue
			}
			m[fd.Name] = vals[i]
		}
		if _, dup := out[key]; !dup {
			out[key] = m
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres %s: select by %s: %w", t.where, t.key, err)
	}
	if isInt {
		// Answer under the caller's spelling of the key ("007" → 7).
		norm := make(map[string]map[string]any, len(out))
		for _, k := range keys {
			if n, err := strconv.ParseInt(k, 10, 64); err == nil {
				if m, ok := out[strconv.FormatInt(n, 10)]; ok {
					norm[k] = m
				}
			}
		}
		return norm, nil
	}
	return out, nil
}
