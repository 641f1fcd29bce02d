// Package postgres is the Postgres implementation of sources.Source: an
// analyst's SELECT, sharded by ranges of an integer column (shard_by) or,
// when there is none, by a hash of the entity key.
//
// The query is never edited: it is wrapped as a subquery,
// SELECT … FROM (<query>) q WHERE <shard predicate>, so that Postgres pushes
// the predicate down to an index on the shard column. Schema describes the
// query without running it; Plan runs one aggregate over it (min, max and
// counts of the shard column); Open streams one shard over its own
// connection with the binary protocol, row by row, into Arrow record
// batches, so memory is bounded by the batch size, not the shard size.
// Sessions are read-only (default_transaction_read_only), so a query cannot
// write even through a volatile function.
package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sources"
)

// defaultConnectTimeout bounds connecting when the DSN sets no connect_timeout,
// so an unreachable server fails in seconds instead of hanging a run.
const defaultConnectTimeout = 10 * time.Second

// Source is one query on one database. It holds a parsed connection config
// and no open connection (each call connects on its own), so it is safe for
// concurrent use and needs no Close.
type Source struct {
	cfg     *pgx.ConnConfig
	query   string
	shardBy string
	key     string
	// queryID fingerprints the query text; plans carry it so a resumed run
	// notices a query edited after planning.
	queryID string
}

var _ sources.Source = (*Source)(nil)

// Option configures New.
type Option func(*Source)

// WithKey names the entity key column. It enables hash sharding
// ((hashtext(key::text) & 2147483647) % n) when the spec has no shard_by;
// it is ignored when shard_by is set, since ranges are cheaper to read.
func WithKey(key string) Option {
	return func(s *Source) { s.key = key }
}

// New checks the query's shape (one statement, no trailing semicolon), parses
// the DSN and connects once to fail early, naming host and port, when the
// server is unreachable. Error messages never contain the password.
func New(ctx context.Context, spec jobs.PostgresSourceSpec, opts ...Option) (*Source, error) {
	s := &Source{query: spec.Query, shardBy: spec.ShardBy}
	for _, o := range opts {
		o(s)
	}
	if spec.DSN == "" {
		return nil, errors.New("postgres source: source.postgres.dsn is empty")
	}
	if err := checkQuery(spec.Query); err != nil {
		return nil, fmt.Errorf("postgres source: source.postgres.query %w", err)
	}
	if s.shardBy == "" && s.key == "" {
		return nil, errors.New("postgres source: source.postgres.shard_by is required: name an integer column of the query to split it into ranges (or configure the key for hash sharding)")
	}
	cfg, err := pgx.ParseConfig(spec.DSN)
	if err != nil {
		// pgconn's ParseConfigError redacts the password.
		return nil, fmt.Errorf("postgres source: source.postgres.dsn: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "precog-source"
	}
	s.cfg = cfg
	sum := sha256.Sum256([]byte(spec.Query))
	s.queryID = hex.EncodeToString(sum[:8])

	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	conn.Close(context.Background())
	return s, nil
}

// Query returns the analyst's query as given.
func (s *Source) Query() string { return s.query }

// addr names the server for error messages: host:port, or the socket directory.
func (s *Source) addr() string {
	return net.JoinHostPort(s.cfg.Host, strconv.Itoa(int(s.cfg.Port)))
}

// connect opens a connection, wrapping failures with the server's address
// (ConnectError names user and database, never the password).
func (s *Source) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres source: connecting to %s: %w", s.addr(), err)
	}
	return conn, nil
}

// wrapPrefix and wrapSuffix enclose the query as a subquery. The newlines
// keep a trailing -- comment in the query from swallowing the suffix.
const (
	wrapPrefix = "SELECT * FROM (\n"
	wrapSuffix = "\n) q"
)

// queryErr wraps a Postgres error about the wrapped query, translating its
// error position into the analyst's query.
func (s *Source) queryErr(what, prefix string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Position > 0 {
		if off := charOffset(s.query, int(pe.Position)-utf8.RuneCountInString(prefix)); off >= 0 {
			return fmt.Errorf("postgres source: %s: source.postgres.query at %s: %w", what, lineCol(s.query, off), err)
		}
	}
	return fmt.Errorf("postgres source: %s: %w", what, err)
}

// column is one result column of the query and how it is read.
type column struct {
	name   string
	pgType string // Postgres type name, for messages
	// read is how the column is fetched and decoded; nil when the type is
	// not supported (the column may still exist in the schema, unused).
	read *readType
}

// readType is a supported Postgres type: the canonical type the column is
// cast to in the select list (so domains, numeric, uuid or pgvector's
// vector arrive in one of a few binary formats), the OID of that canonical
// type, and the Arrow type it becomes.
type readType struct {
	cast  string
	oid   uint32
	arrow arrow.DataType
	// elemOID is the element type's OID for arrays, 0 otherwise.
	elemOID uint32
}

// Built-in type OIDs (pg_type.dat).
const (
	oidBool     = 16
	oidName     = 19
	oidInt8     = 20
	oidInt2     = 21
	oidInt4     = 23
	oidText     = 25
	oidFloat4   = 700
	oidFloat8   = 701
	oidBPChar   = 1042
	oidVarchar  = 1043
	oidNumeric  = 1700
	oidUUID     = 2950
	oidInt2Arr  = 1005
	oidInt4Arr  = 1007
	oidInt8Arr  = 1016
	oidFloat4Ar = 1021
	oidFloat8Ar = 1022
	oidNumArr   = 1231
)

// builtinNames names the built-in types resolved without a catalog query.
var builtinNames = map[uint32]string{
	oidBool: "bool", oidName: "name", oidInt8: "int8", oidInt2: "int2", oidInt4: "int4",
	oidText: "text", oidFloat4: "float4", oidFloat8: "float8", oidBPChar: "bpchar",
	oidVarchar: "varchar", oidNumeric: "numeric", oidUUID: "uuid",
	oidInt2Arr: "_int2", oidInt4Arr: "_int4", oidInt8Arr: "_int8",
	oidFloat4Ar: "_float4", oidFloat8Ar: "_float8", oidNumArr: "_numeric",
}

func listOf(t arrow.DataType) arrow.DataType { return arrow.ListOf(t) }

// readTypes maps a Postgres type name (pg_type.typname) to how it is read.
var readTypes = map[string]*readType{
	"int2":     {cast: "int2", oid: oidInt2, arrow: arrow.PrimitiveTypes.Int16},
	"int4":     {cast: "int4", oid: oidInt4, arrow: arrow.PrimitiveTypes.Int32},
	"int8":     {cast: "int8", oid: oidInt8, arrow: arrow.PrimitiveTypes.Int64},
	"float4":   {cast: "float4", oid: oidFloat4, arrow: arrow.PrimitiveTypes.Float32},
	"float8":   {cast: "float8", oid: oidFloat8, arrow: arrow.PrimitiveTypes.Float64},
	"numeric":  {cast: "float8", oid: oidFloat8, arrow: arrow.PrimitiveTypes.Float64},
	"text":     {cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String},
	"varchar":  {cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String},
	"bpchar":   {cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String},
	"name":     {cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String},
	"uuid":     {cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String},
	"bool":     {cast: "bool", oid: oidBool, arrow: arrow.FixedWidthTypes.Boolean},
	"_int2":    {cast: "int2[]", oid: oidInt2Arr, elemOID: oidInt2, arrow: listOf(arrow.PrimitiveTypes.Int16)},
	"_int4":    {cast: "int4[]", oid: oidInt4Arr, elemOID: oidInt4, arrow: listOf(arrow.PrimitiveTypes.Int32)},
	"_int8":    {cast: "int8[]", oid: oidInt8Arr, elemOID: oidInt8, arrow: listOf(arrow.PrimitiveTypes.Int64)},
	"_float4":  {cast: "float4[]", oid: oidFloat4Ar, elemOID: oidFloat4, arrow: listOf(arrow.PrimitiveTypes.Float32)},
	"_float8":  {cast: "float8[]", oid: oidFloat8Ar, elemOID: oidFloat8, arrow: listOf(arrow.PrimitiveTypes.Float64)},
	"_numeric": {cast: "float8[]", oid: oidFloat8Ar, elemOID: oidFloat8, arrow: listOf(arrow.PrimitiveTypes.Float64)},
	// pgvector's vector has a cast to real[].
	"vector": {cast: "float4[]", oid: oidFloat4Ar, elemOID: oidFloat4, arrow: listOf(arrow.PrimitiveTypes.Float32)},
}

// enumType reads enum columns as their labels.
var enumType = &readType{cast: "text", oid: oidText, arrow: arrow.BinaryTypes.String}

// supportedTypes lists the supported type names for error messages.
const supportedTypes = "int2, int4, int8, float4, float8, numeric, text, varchar, char, name, uuid, bool, enums, " +
	"arrays of int2/int4/int8/float4/float8/numeric, and pgvector's vector"

// describe returns the query's result columns without running it.
func (s *Source) describe(ctx context.Context, conn *pgx.Conn) ([]column, error) {
	sd, err := conn.PgConn().Prepare(ctx, "", wrapPrefix+s.query+wrapSuffix+" LIMIT 0", nil)
	if err != nil {
		return nil, s.queryErr("describing the query", wrapPrefix, err)
	}
	if len(sd.Fields) == 0 {
		return nil, errors.New("postgres source: source.postgres.query returns no columns")
	}
	names, err := s.typeNames(ctx, conn, sd.Fields)
	if err != nil {
		return nil, err
	}
	cols := make([]column, len(sd.Fields))
	seen := make(map[string]bool, len(sd.Fields))
	for i, f := range sd.Fields {
		if seen[f.Name] {
			return nil, fmt.Errorf("postgres source: source.postgres.query returns column %q twice; give the columns distinct names with AS", f.Name)
		}
		seen[f.Name] = true
		tn := names[f.DataTypeOID]
		cols[i] = column{name: f.Name, pgType: tn.name, read: readTypes[tn.name]}
		if tn.enum {
			cols[i].read = enumType
		}
	}
	return cols, nil
}

// typeName is what the catalog says about one result type: its name and
// whether it is an enum. (Postgres describes domain-typed columns by their
// base type, so domains need no resolving.)
type typeName struct {
	name string
	enum bool
}

// typeNames resolves the fields' type OIDs to names: built-ins from a table,
// others (enums, extension types such as pgvector's vector) from pg_type.
func (s *Source) typeNames(ctx context.Context, conn *pgx.Conn, fields []pgconn.FieldDescription) (map[uint32]typeName, error) {
	out := make(map[uint32]typeName)
	var unknown []uint32
	for _, f := range fields {
		if n, ok := builtinNames[f.DataTypeOID]; ok {
			out[f.DataTypeOID] = typeName{name: n}
		} else if _, dup := out[f.DataTypeOID]; !dup {
			out[f.DataTypeOID] = typeName{name: "oid " + strconv.FormatUint(uint64(f.DataTypeOID), 10)}
			unknown = append(unknown, f.DataTypeOID)
		}
	}
	if len(unknown) == 0 {
		return out, nil
	}
	rows, err := conn.Query(ctx, "SELECT oid, typname, typtype = 'e' FROM pg_type WHERE oid = ANY($1)", unknown)
	if err != nil {
		return nil, fmt.Errorf("postgres source: looking up result column types: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var oid uint32
		var tn typeName
		if err := rows.Scan(&oid, &tn.name, &tn.enum); err != nil {
			return nil, fmt.Errorf("postgres source: looking up result column types: %w", err)
		}
		out[oid] = tn
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres source: looking up result column types: %w", err)
	}
	return out, nil
}

// metaPGType is the Arrow field metadata key holding the column's Postgres
// type name.
const metaPGType = "postgres.type"

// arrowField is the schema field of a column. An unsupported column is
// typed Null, with its Postgres type in the metadata; Open refuses to read it.
func (c column) arrowField() arrow.Field {
	md := arrow.NewMetadata([]string{metaPGType}, []string{c.pgType})
	if c.read == nil {
		return arrow.Field{Name: c.name, Type: arrow.Null, Nullable: true, Metadata: md}
	}
	return arrow.Field{Name: c.name, Type: c.read.arrow, Nullable: true, Metadata: md}
}

// Schema describes the query (no rows are read) and maps its columns to
// Arrow: int2/int4/int8 → Int16/Int32/Int64, float4/float8/numeric →
// Float32/Float64/Float64, text/varchar/char/name/uuid/enums → String, bool
// → Boolean, numeric arrays and pgvector's vector → List. Columns of other
// types are typed Null (metadata "postgres.type" names the type): they are
// fine as long as the job does not read them.
func (s *Source) Schema(ctx context.Context) (*arrow.Schema, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	cols, err := s.describe(ctx, conn)
	if err != nil {
		return nil, err
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = c.arrowField()
	}
	return arrow.NewSchema(fields, nil), nil
}

// shardPlan is the JSON plan of one shard. Kind "range": rows with
// Lo <= shard_by < Hi (Hi nil: through the largest int8); "null": rows whose
// shard_by is NULL; "hash": rows whose key hashes to Rem modulo Mod.
type shardPlan struct {
	QueryID string `json:"query_id"`
	Kind    string `json:"kind"`
	Column  string `json:"column"`
	Lo      int64  `json:"lo,omitempty"`
	Hi      *int64 `json:"hi,omitempty"`
	Mod     int64  `json:"mod,omitempty"`
	Rem     int64  `json:"rem,omitempty"`
	Rows    int64  `json:"rows"`
}

const (
	kindRange = "range"
	kindNull  = "null"
	kindHash  = "hash"
)

// desc is the human description of a shard, also the prefix of Position.
func (sp shardPlan) desc() string {
	switch sp.Kind {
	case kindRange:
		if sp.Hi == nil {
			return fmt.Sprintf("%s [%d,max]", sp.Column, sp.Lo)
		}
		return fmt.Sprintf("%s [%d,%d)", sp.Column, sp.Lo, *sp.Hi)
	case kindNull:
		return fmt.Sprintf("%s IS NULL", sp.Column)
	default:
		return fmt.Sprintf("hash(%s) %% %d = %d", sp.Column, sp.Mod, sp.Rem)
	}
}

// Plan splits the query's rows into shards of about rowsPerShard rows. With
// shard_by it runs SELECT min, max, count over the query and cuts
// [min, max] into ceil(count/rowsPerShard) equal-width ranges, assuming ids
// are spread uniformly (row counts are estimates; sparse or skewed ids give
// uneven shards). Rows whose shard_by is NULL get one shard of their own,
// last, so none is dropped. Without shard_by it hash-partitions the key
// into ceil(count/rowsPerShard) shards. Zero rows plan zero shards. The same
// data always plans the same shards.
func (s *Source) Plan(ctx context.Context, rowsPerShard int64) ([]sources.ShardPlan, error) {
	if rowsPerShard <= 0 {
		return nil, fmt.Errorf("postgres source: rows per shard must be positive, got %d", rowsPerShard)
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	cols, err := s.describe(ctx, conn)
	if err != nil {
		return nil, err
	}
	var plans []shardPlan
	if s.shardBy != "" {
		plans, err = s.planRanges(ctx, conn, cols, rowsPerShard)
	} else {
		plans, err = s.planHash(ctx, conn, cols, rowsPerShard)
	}
	if err != nil {
		return nil, err
	}
	out := make([]sources.ShardPlan, len(plans))
	for i, sp := range plans {
		raw, err := json.Marshal(sp)
		if err != nil {
			return nil, fmt.Errorf("postgres source: encoding plan %s: %w", sp.desc(), err)
		}
		out[i] = sources.ShardPlan{Plan: raw, Rows: sp.Rows, Desc: "query " + sp.desc()}
	}
	return out, nil
}

// findColumn returns the named column or an error naming the spec field.
func findColumn(cols []column, name, field string) (column, error) {
	for _, c := range cols {
		if c.name == name {
			return c, nil
		}
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return column{}, fmt.Errorf("postgres source: %s: column %q is not in the query's result (columns: %s)", field, name, strings.Join(names, ", "))
}

func (s *Source) planRanges(ctx context.Context, conn *pgx.Conn, cols []column, rowsPerShard int64) ([]shardPlan, error) {
	col, err := findColumn(cols, s.shardBy, "source.postgres.shard_by")
	if err != nil {
		return nil, err
	}
	if col.read == nil || (col.read.oid != oidInt2 && col.read.oid != oidInt4 && col.read.oid != oidInt8) {
		return nil, fmt.Errorf("postgres source: source.postgres.shard_by: column %q is %s, want an integer column (int2, int4 or int8)", col.name, col.pgType)
	}
	ident := "q." + pgx.Identifier{col.name}.Sanitize()
	prefix := fmt.Sprintf("SELECT min(%s)::int8, max(%s)::int8, count(%s), count(*) FROM (\n", ident, ident, ident)
	sql := prefix + s.query + wrapSuffix
	var lo, hi *int64
	var nonNull, total int64
	if err := conn.QueryRow(ctx, sql).Scan(&lo, &hi, &nonNull, &total); err != nil {
		return nil, s.queryErr(fmt.Sprintf("planning shards (min/max/count of %q)", col.name), prefix, err)
	}
	plans := splitRange(s.queryID, col.name, lo, hi, nonNull, rowsPerShard)
	if nulls := total - nonNull; nulls > 0 {
		plans = append(plans, shardPlan{QueryID: s.queryID, Kind: kindNull, Column: col.name, Rows: nulls})
	}
	return plans, nil
}

// splitRange cuts [lo, hi] into ceil(count/rowsPerShard) near-equal-width
// [lo, hi) ranges (never more ranges than values), with row estimates that
// sum to count. Big-integer arithmetic keeps the full int8 range exact.
func splitRange(queryID, column string, lo, hi *int64, count, rowsPerShard int64) []shardPlan {
	if count == 0 || lo == nil || hi == nil {
		return nil
	}
	n := (count + rowsPerShard - 1) / rowsPerShard
	minV, maxV := big.NewInt(*lo), big.NewInt(*hi)
	span := new(big.Int).Sub(maxV, minV)
	span.Add(span, big.NewInt(1))
	if span.IsInt64() && span.Int64() < n {
		n = span.Int64()
	}
	bn, bc := big.NewInt(n), big.NewInt(count)
	// bound(i) = min + floor(i*span/n); est(i) = floor(count*(bound(i)-min)/span).
	bound := func(i int64) *big.Int {
		v := new(big.Int).Mul(big.NewInt(i), span)
		v.Quo(v, bn)
		return v.Add(v, minV)
	}
	cum := func(b *big.Int) int64 {
		v := new(big.Int).Sub(b, minV)
		v.Mul(v, bc)
		return v.Quo(v, span).Int64()
	}
	out := make([]shardPlan, 0, n)
	for i := int64(0); i < n; i++ {
		a, b := bound(i), bound(i+1)
		sp := shardPlan{QueryID: queryID, Kind: kindRange, Column: column, Lo: a.Int64(), Rows: cum(b) - cum(a)}
		if b.IsInt64() {
			h := b.Int64()
			sp.Hi = &h
		}
		out = append(out, sp)
	}
	return out
}

func (s *Source) planHash(ctx context.Context, conn *pgx.Conn, cols []column, rowsPerShard int64) ([]shardPlan, error) {
	col, err := findColumn(cols, s.key, "source.key")
	if err != nil {
		return nil, err
	}
	var total int64
	const prefix = "SELECT count(*) FROM (\n"
	if err := conn.QueryRow(ctx, prefix+s.query+wrapSuffix).Scan(&total); err != nil {
		return nil, s.queryErr("planning shards (count)", prefix, err)
	}
	if total == 0 {
		return nil, nil
	}
	n := (total + rowsPerShard - 1) / rowsPerShard
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("postgres source: %d rows at %d rows per shard is more than %d hash shards", total, rowsPerShard, math.MaxInt32)
	}
	out := make([]shardPlan, n)
	for i := range n {
		rows := (i+1)*total/n - i*total/n
		out[i] = shardPlan{QueryID: s.queryID, Kind: kindHash, Column: col.name, Mod: n, Rem: i, Rows: rows}
	}
	return out, nil
}
