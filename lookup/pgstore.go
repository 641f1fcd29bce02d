package lookup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
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

	mu      sync.Mutex
	intKey  bool
	resolve bool // key type known
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
func (t *pgTable) keyIsInt(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resolve {
		return t.intKey, nil
	}
	var typ string
	err := t.pool.QueryRow(ctx,
		`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`,
		t.schema, t.table, t.key).Scan(&typ)
	if errors.Is(err, pgx.ErrNoRows) {
		// information_schema lists only the columns the role may use: a
		// table the role cannot read looks like no table at all. Reading
		// it says which it is (permission denied, or no such relation).
		if err := t.check(ctx); err != nil {
			return false, err
		}
		return false, fmt.Errorf("postgres %s: %w %q (is the table published?)", t.where, errNoKeyColumn, t.key)
	}
	if err != nil {
		return false, fmt.Errorf("postgres %s: key column type: %w", t.where, err)
	}
	switch typ {
	case "bigint", "integer", "smallint":
		t.intKey = true
	}
	t.resolve = true
	return t.intKey, nil
}

// errNoKeyColumn is a table without the job's key column.
var errNoKeyColumn = errors.New("no key column")

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

// rows fetches the rows of keys. cols nil selects every column. When a key
// has several rows (upsert mode keeps one per run parameter set), the one
// with the latest computed_at wins if order is set.
func (t *pgTable) rows(ctx context.Context, keys []string, cols []string, order string) (map[string]map[string]any, error) {
	isInt, err := t.keyIsInt(ctx)
	if err != nil {
		return nil, err
	}
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
