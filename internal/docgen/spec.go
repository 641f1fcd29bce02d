package docgen

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/precog-ml/precog/jobs"
)

// SpecExample is the reference's example: a spec using most fields. The
// generator parses it with jobs.Parse, so it cannot drift from the code.
const SpecExample = `name: user-recs
schedule: "0 */4 * * *"
timezone: Europe/Paris
concurrency: forbid
catchup: latest
starting_deadline: 4h
max_staleness: 6h
pool: default
priority: 0
source:
  parquet:
    path: "data/users/dt={{.date}}"
  key: user_id
  rows_per_shard: 250000
model:
  path: models/recs.onnx
  inputs:
    features: { columns: [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] }
  outputs:
    topk_items: items
    topk_scores: scores
  batch_size: 1024
  device: cpu
sinks:
  redis:    { addr: "${REDIS_ADDR}", namespace: recs, ttl: 48h, encoding: json }
  postgres: { dsn: "${DATABASE_URL}", table: user_recs, mode: replace, retain: 2 }
  parquet:  { path: "out/user_recs/date={{.date}}", compression: snappy }
retry: { max_attempts: 3, transient_window: 60s }
max_rejected_fraction: 0.01
duplicate_keys: fail
checks:
  rows: { min_ratio: 0.9, max_ratio: 1.2 }
  key_churn: { max: 0.05 }
  outputs:
    items: { min_overlap_at_k: 0.5 }
  on_failure: hold
serving:
  live: true
  writeback_ttl: 1h
`

// probeSpec is the smallest spec with every optional block present, each
// with only its required fields: parsing it shows what defaulting fills in.
// A second probe swaps the source for Postgres.
func probeSpec(postgresSource bool) map[string]any {
	src := map[string]any{"parquet": map[string]any{"path": "in.parquet"}, "key": "id"}
	if postgresSource {
		src = map[string]any{"postgres": map[string]any{"dsn": "postgres://u@localhost/db", "query": "SELECT id, a FROM t"}, "key": "id"}
	}
	return map[string]any{
		"name":   "probe",
		"source": src,
		"model": map[string]any{
			"path":    "m.onnx",
			"inputs":  map[string]any{"x": map[string]any{"columns": []any{"a"}}},
			"outputs": map[string]any{"y": "y"},
		},
		"sinks": map[string]any{
			"redis":    map[string]any{"addr": "localhost:6379", "namespace": "ns"},
			"postgres": map[string]any{"dsn": "postgres://u@localhost/db", "table": "t"},
			"parquet":  map[string]any{"path": "out"},
		},
		"checks":  map[string]any{"rows": map[string]any{"min_ratio": 0.5}},
		"serving": map[string]any{"features": map[string]any{"dsn": "postgres://u@localhost/db", "table": "f"}},
	}
}

func parseProbe(m map[string]any) (*jobs.Spec, error) {
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	return jobs.Parse(b, "", nil, nil)
}

// Field is one documented spec field.
type Field struct {
	Path     string // yaml path, "sinks.redis.ttl"; a map's entries are <name>
	Type     string
	Default  string
	Allowed  string
	Required bool
	Doc      string
}

// Section is a block of the spec: its path ("" for the top level) and fields.
type Section struct {
	Path   string
	Doc    string
	Fields []Field
}

// goDocs holds the doc comments of package jobs: per struct type, its own
// and its fields'; per named type, the string constants of that type.
type goDocs struct {
	types  map[string]string
	fields map[string]map[string]string
	consts map[string][]string
	// values holds every constant with a literal value, by name, to
	// resolve a doc comment's "Default DefaultCheckSample".
	values map[string]string
}

func readGoDocs(dir string) (*goDocs, error) {
	fset := token.NewFileSet()
	d := &goDocs{types: map[string]string{}, fields: map[string]map[string]string{}, consts: map[string][]string{}, values: map[string]string{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					d.readType(gd, s)
				case *ast.ValueSpec:
					d.readConst(gd, s)
				}
			}
		}
	}
	return d, nil
}

func (d *goDocs) readType(gd *ast.GenDecl, s *ast.TypeSpec) {
	doc := s.Doc.Text()
	if doc == "" && len(gd.Specs) == 1 {
		doc = gd.Doc.Text()
	}
	d.types[s.Name.Name] = doc
	st, ok := s.Type.(*ast.StructType)
	if !ok {
		return
	}
	fm := map[string]string{}
	for _, f := range st.Fields.List {
		text := strings.TrimSpace(f.Doc.Text() + " " + f.Comment.Text())
		for _, n := range f.Names {
			fm[n.Name] = text
		}
	}
	d.fields[s.Name.Name] = fm
}

// readConst records typed string constants (Kind Type = "value") as the
// allowed values of their type.
func (d *goDocs) readConst(gd *ast.GenDecl, s *ast.ValueSpec) {
	if gd.Tok != token.CONST {
		return
	}
	for i, v := range s.Values {
		if lit, ok := v.(*ast.BasicLit); ok && i < len(s.Names) {
			val := strings.ReplaceAll(lit.Value, "_", "")
			if u, err := strconv.Unquote(lit.Value); err == nil {
				val = u
			}
			d.values[s.Names[i].Name] = val
		}
	}
	if s.Type == nil {
		return
	}
	id, ok := s.Type.(*ast.Ident)
	if !ok {
		return
	}
	for _, v := range s.Values {
		if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if u, err := strconv.Unquote(lit.Value); err == nil && u != "" {
				d.consts[id.Name] = append(d.consts[id.Name], u)
			}
		}
	}
}

// SpecReference builds the job spec reference from package jobs (its Go
// sources in jobsDir for the doc comments): every field of jobs.Spec by
// its yaml path, with its type, its default (what parsing fills in), its
// allowed values and whether it is required.
func SpecReference(jobsDir string) (string, error) {
	docs, err := readGoDocs(jobsDir)
	if err != nil {
		return "", err
	}
	if _, err := jobs.Parse([]byte(SpecExample), "", map[string]string{"date": "2026-11-01"}, exampleEnv); err != nil {
		return "", fmt.Errorf("the reference's example does not parse: %w", err)
	}
	g := &specGen{docs: docs}
	for _, pg := range []bool{false, true} {
		probe := probeSpec(pg)
		spec, err := parseProbe(probe)
		if err != nil {
			return "", fmt.Errorf("probe spec: %w", err)
		}
		g.defaults(reflect.ValueOf(spec).Elem(), "", probe)
		g.required(probe, nil)
	}
	g.walk(reflect.TypeOf(jobs.Spec{}), "", "Spec")
	return g.markdown(), nil
}

// exampleEnv is the environment the example is checked in.
func exampleEnv(name string) (string, bool) {
	v, ok := map[string]string{"REDIS_ADDR": "localhost:6379", "DATABASE_URL": "postgres://u@localhost/db"}[name]
	return v, ok
}

type specGen struct {
	docs     *goDocs
	sections []*Section
	defs     map[string]string
	req      map[string]bool
}

// defaults records, per yaml path, the non-zero values parsing gave the
// probe in fields the probe left out.
func (g *specGen) defaults(v reflect.Value, path string, probe map[string]any) {
	if g.defs == nil {
		g.defs = map[string]string{}
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		p := join(path, name)
		fv := v.Field(i)
		if s, ok := structOf(fv); ok {
			g.defaults(s, p, probe)
			continue
		}
		if inProbe(probe, p) || fv.IsZero() {
			continue
		}
		if fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice {
			continue
		}
		g.defs[p] = formatValue(fv)
	}
}

// required marks each field the probe sets whose absence fails parsing
// with an error naming it.
func (g *specGen) required(probe map[string]any, prefix []string) {
	if g.req == nil {
		g.req = map[string]bool{}
	}
	m := lookupMap(probe, prefix)
	for k, v := range m {
		path := append(append([]string(nil), prefix...), k)
		p := strings.Join(path, ".")
		if _, ok := v.(map[string]any); ok && !isMapField(p) {
			g.required(probe, path)
			continue
		}
		saved := m[k]
		delete(m, k)
		_, err := parseProbe(probe)
		m[k] = saved
		var se *jobs.SpecError
		if err != nil && (errorNames(err, p) || (errors.As(err, &se) && se.Field == p)) {
			g.req[p] = true
		}
	}
}

// isMapField: paths whose value is a map of user-named entries.
func isMapField(p string) bool {
	return p == "model.inputs" || p == "model.outputs" || p == "checks.outputs"
}

func errorNames(err error, path string) bool {
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.Contains(line, path+":") || strings.Contains(line, path+" ") {
			return true
		}
	}
	return false
}

func lookupMap(m map[string]any, path []string) map[string]any {
	for _, k := range path {
		m = m[k].(map[string]any)
	}
	return m
}

func inProbe(m map[string]any, path string) bool {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = mm[k]; !ok {
			return false
		}
	}
	return true
}

var durationType = reflect.TypeOf(jobs.Duration{})

// structOf is v's struct (through a non-nil pointer) when v holds a
// nested block rather than a value.
func structOf(v reflect.Value) (reflect.Value, bool) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() || v.Elem().Kind() != reflect.Struct || v.Elem().Type() == durationType {
			return reflect.Value{}, false
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && v.Type() != durationType {
		return v, true
	}
	return reflect.Value{}, false
}

func formatValue(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Type() == durationType {
		return formatDuration(v.Interface().(jobs.Duration).Duration)
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.String:
		return v.String()
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration writes a duration as a spec would: 60s, 5m, 1h30m.
func formatDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	s = strings.TrimSuffix(s, "0m")
	if s == "" {
		return "0s"
	}
	if strings.HasSuffix(s, "h") || strings.HasSuffix(s, "m") || strings.HasSuffix(s, "s") {
		return s
	}
	return d.String()
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "-" {
		return ""
	}
	if tag == "" {
		return strings.ToLower(f.Name)
	}
	return tag
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// walk documents struct type t at path; typeName is its Go name, for its
// doc comments.
func (g *specGen) walk(t reflect.Type, path, typeName string) {
	sec := &Section{Path: path, Doc: g.docs.types[typeName]}
	g.sections = append(g.sections, sec)
	var nested []func()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		p := join(path, name)
		doc := g.docs.fields[typeName][f.Name]
		note := fieldNotes[p]
		ft := f.Type
		fld := Field{Path: p, Doc: strings.TrimSpace(note.Doc + " " + oneLine(doc)), Required: g.req[p], Default: g.defs[p]}
		switch {
		case note.Default == "-":
		case note.Default != "" && fld.Default == "":
			fld.Default = note.Default
		case fld.Default == "":
			fld.Default = g.defaultFromDoc(doc)
		}
		fld.Allowed = g.allowed(ft, doc)
		if note.Allowed != "" {
			fld.Allowed = note.Allowed
		}
		fld.Type = g.typeName(ft, p)
		if et, ok := blockType(ft); ok {
			child, childName := p, et.Name()
			if ft.Kind() == reflect.Map {
				child = p + ".<name>"
			}
			nested = append(nested, func() { g.walk(et, child, childName) })
		}
		sec.Fields = append(sec.Fields, fld)
	}
	for _, n := range nested {
		n()
	}
}

// blockType is the struct a field holds as a nested block (directly,
// through a pointer, or as a map's values).
func blockType(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != durationType {
		return t, true
	}
	return nil, false
}

func (g *specGen) typeName(t reflect.Type, path string) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		return "duration (`90s`, `48h`)"
	}
	if t.Name() == "TextColumns" {
		return "string or list of strings"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + plural(g.typeName(t.Elem(), path))
	case reflect.Map:
		if _, ok := blockType(t); ok {
			return fmt.Sprintf("map of name to [object](#%s)", Slug(path+".<name>"))
		}
		return "map of string to " + g.typeName(t.Elem(), path)
	case reflect.Struct:
		return fmt.Sprintf("[object](#%s)", Slug(path))
	}
	return t.String()
}

func plural(s string) string {
	switch s {
	case "string", "integer", "number", "boolean":
		return s + "s"
	}
	return s
}

var (
	// "mean | cls | max | none"
	barListRE = regexp.MustCompile("`?([a-z][a-z0-9_:]*)`?(?:\\s*\\|\\s*`?[a-z][a-zA-Z0-9_:]*`?)+")
	// "Default 0.01.", "default 512", "(default)" after a value
	defaultRE      = regexp.MustCompile(`(?i)\bdefault:?\s+("[^"]*"|[^\s;,.)]+(?:\.[0-9]+)?)`)
	defaultAfterRE = regexp.MustCompile(`\b([a-z_]+) \(default\)`)
)

// allowed lists a field's allowed values: the typed string constants of
// its named type, else a "a | b | c" list in its doc comment.
func (g *specGen) allowed(t reflect.Type, doc string) string {
	if vs := g.docs.consts[t.Name()]; len(vs) > 0 && t.Kind() == reflect.String {
		seen := map[string]bool{}
		var out []string
		for _, v := range vs {
			if !seen[v] {
				seen[v] = true
				out = append(out, "`"+v+"`")
			}
		}
		return strings.Join(out, ", ")
	}
	if m := barListRE.FindString(doc); m != "" {
		var out []string
		for _, v := range strings.Split(m, "|") {
			out = append(out, "`"+strings.Trim(strings.TrimSpace(v), "`")+"`")
		}
		return strings.Join(out, ", ")
	}
	return ""
}

// defaultFromDoc reads a default the doc comment states ("Default 0.01.",
// "default 1024", "none (default)", "Default DefaultCheckSample"), for
// defaults that parsing does not fill in. Only values that look like one
// (a number, a duration, a quoted word, a constant of the package) count.
func (g *specGen) defaultFromDoc(doc string) string {
	if m := defaultAfterRE.FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	m := defaultRE.FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	v := m[1]
	if c, ok := g.docs.values[v]; ok {
		return c
	}
	if u, err := strconv.Unquote(v); err == nil {
		return u
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	if _, err := time.ParseDuration(v); err == nil {
		return v
	}
	if v == "true" || v == "false" {
		return v
	}
	return ""
}

func (g *specGen) markdown() string {
	var b strings.Builder
	b.WriteString(`# Job spec reference

<!-- Generated by internal/docgen from package jobs (jobs/spec.go, the
defaults it applies): do not edit; run make docs. -->

A job spec is one YAML file (v1). Unknown fields are errors, and every
error names the field and line. ` + "`${VAR}` and `${VAR:-default}`" + ` are
expanded from the environment (secrets belong there, never in the file);
` + "`{{.param}}`" + ` templates in ` + "`source.parquet.path`, `source.postgres.query`, `sinks.parquet.path` and `sinks.redis.namespace`" + ` are filled by
` + "`--param k=v`" + `. Relative paths resolve against the spec file's directory.
A default is what precog fills in when the field is absent; "required"
fields must be given.

<!-- toc -->
<!-- /toc -->

## Example

` + "```yaml\n" + SpecExample + "```\n")
	for _, s := range g.sections {
		title, doc := "`"+s.Path+"`", oneLine(s.Doc)
		if s.Path == "" {
			title, doc = "Top level", "The fields of the spec's top level."
		}
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		if doc != "" {
			b.WriteString(doc + "\n\n")
		}
		b.WriteString("| field | type | default | allowed values | description |\n|---|---|---|---|---|\n")
		for _, f := range s.Fields {
			def := f.Default
			switch {
			case f.Required:
				def = "**required**"
			case def != "" && !strings.Contains(def, " "):
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", f.Path, f.Type, def, f.Allowed, cell(f.Doc))
		}
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }
