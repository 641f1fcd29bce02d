package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxSpecBytes bounds the size of a job spec file; a spec is a page of YAML,
// so anything larger is a mistake (a data file passed by accident).
const MaxSpecBytes = 1 << 20

// maxNodes bounds the YAML nodes decoded, alias expansions included, so a
// "billion laughs" document fails fast instead of exhausting memory.
const maxNodes = 100_000

// maxProblems bounds the problems reported for one spec.
const maxProblems = 50

// SpecError is one problem in a job spec. Field is a path such as
// model.inputs.features.columns[3]; Line is the 1-based line of the value in
// File (0 when unknown). Parse and Load return every problem at once, as an
// errors.Join of *SpecError sorted by line, so a user fixes all in one pass.
type SpecError struct {
	File  string
	Field string
	Line  int
	Msg   string
	// Err is the underlying cause, when there is one (for errors.Is).
	Err error
}

// Error reads "job.yaml: model.batch_size: must be > 0 (got -5) (line 12)".
// A message that quotes a value never shows a credential (RedactSecrets):
// spec errors reach logs and terminals.
func (e *SpecError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(RedactSecrets(e.Msg))
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// Unwrap returns the underlying cause, if any.
func (e *SpecError) Unwrap() error { return e.Err }

// Problems returns every *SpecError inside err (which may be an errors.Join
// of them), in order; nil when there is none.
func Problems(err error) []*SpecError {
	var out []*SpecError
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *SpecError:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

// Load reads, expands (${ENV} from the process environment), defaults,
// validates and renders ({{.param}}) the job spec at path. Relative paths in
// the spec (model.path, source.parquet.path, sinks.parquet.path) become
// absolute, resolved against the spec file's directory.
func Load(path string, params map[string]string) (*Spec, error) {
	return load(path, params, false)
}

// LoadForView is Load for read-only views of a spec (`schedule list` and
// `schedule next`, the dashboard's jobs page): they show a job, they never
// connect to its stores, so they need none of the stores' secrets. The
// connection fields of its stores (sinks.*, source.postgres, serving.features:
// dsn, addr, addrs, username, password) keep their ${VAR} text unexpanded,
// other store fields whose variable is unset stay zero, and problems in
// store fields are not reported (the run that connects reports them).
func LoadForView(path string, params map[string]string) (*Spec, error) {
	return load(path, params, true)
}

func load(path string, params map[string]string, view bool) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &SpecError{File: path, Msg: "cannot read job spec: " + pathErrMsg(err), Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
	if err != nil {
		return nil, &SpecError{File: path, Msg: "cannot read job spec: " + pathErrMsg(err), Err: err}
	}
	if len(data) > MaxSpecBytes {
		return nil, &SpecError{File: path, Msg: fmt.Sprintf("job spec is larger than %d bytes; is this really a job spec?", MaxSpecBytes)}
	}
	return parseSpec(data, path, params, os.LookupEnv, view)
}

func pathErrMsg(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Parse is Load on bytes: file names the spec in errors and anchors its
// relative paths as Load does ("": they stay relative to the working
// directory);
// lookupEnv resolves ${VAR} (nil: every variable is unset).
func Parse(data []byte, file string, params map[string]string, lookupEnv func(string) (string, bool)) (*Spec, error) {
	return parseSpec(data, file, params, lookupEnv, false)
}

// ParseForView is LoadForView on bytes: the dashboard reads the spec a run
// recorded, to show a job's schedule when no spec file is at hand.
func ParseForView(data []byte, file string, params map[string]string) (*Spec, error) {
	return parseSpec(data, file, params, os.LookupEnv, true)
}

func parseSpec(data []byte, file string, params map[string]string, lookupEnv func(string) (string, bool), view bool) (*Spec, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	d := &decoder{
		file:    file,
		env:     lookupEnv,
		lines:   map[string]int{},
		set:     map[string]bool{},
		errPath: map[string]bool{},
		budget:  maxNodes,
		view:    view,
	}
	root, err := d.parseYAML(data)
	if err != nil {
		return nil, err
	}
	var s Spec
	d.decode(root, reflect.ValueOf(&s).Elem(), "")
	s.File = file
	s.Raw = append([]byte(nil), data...)
	if len(params) > 0 {
		s.Params = make(map[string]string, len(params))
		for k, v := range params {
			s.Params[k] = v
		}
	}
	if d.budget < 0 {
		// Too large to be a spec: what was decoded is incomplete, so
		// validating it would only add noise.
		return nil, d.joined()
	}
	d.checkParams(params)
	d.applyDefaults(&s)
	d.validate(&s)
	d.renderTemplates(&s)
	if len(d.errs) > 0 {
		return nil, d.joined()
	}
	if file != "" {
		// Absolute, so that the spec (and its Hash) does not depend on the
		// directory precog was started from.
		base := filepath.Dir(file)
		if abs, err := filepath.Abs(base); err == nil {
			base = abs
		}
		s.Model.Path = resolvePath(base, s.Model.Path)
		for name, in := range s.Model.Inputs {
			if in.Tokenizer != "" {
				in.Tokenizer = resolvePath(base, in.Tokenizer)
				s.Model.Inputs[name] = in
			}
		}
		if s.Source.Parquet != nil {
			s.Source.Parquet.Path = resolvePath(base, s.Source.Parquet.Path)
		}
		if s.Sinks.Parquet != nil {
			s.Sinks.Parquet.Path = resolvePath(base, s.Sinks.Parquet.Path)
		}
	}
	if s.Source.Parquet != nil && s.Sinks.Parquet != nil {
		if msg := overlap(s.Source.Parquet.Path, s.Sinks.Parquet.Path); msg != "" {
			d.fail("sinks.parquet.path", "%s", msg)
			return nil, d.joined()
		}
	}
	return &s, nil
}

// overlap explains why a Parquet sink directory must not be used with a
// source path ("" when it may): a publish replaces the sink's directory, so
// a sink equal to, inside or around the source would replace the input.
// The source's glob is reduced to its fixed leading directories.
func overlap(source, sink string) string {
	if IsURL(source) != IsURL(sink) {
		return "" // one on object storage, the other on disk
	}
	src, dst := source, sink
	if IsURL(source) {
		// Compared as paths, without the URLs' options.
		src, dst = strings.SplitN(src, "?", 2)[0], path.Clean(strings.SplitN(sink, "?", 2)[0])
	}
	if i := strings.IndexAny(src, "*?[{"); i >= 0 {
		src = filepath.Dir(src[:i] + "x")
	}
	var a, b string
	if IsURL(source) {
		a, b = path.Clean(src), dst
	} else {
		a, b = realPath(src), realPath(dst)
	}
	switch {
	case a == b:
		return fmt.Sprintf("%q is the source's path too (%s): a publish would replace the input with predictions", sink, source)
	case within(b, a):
		return fmt.Sprintf("%q is inside the source path %s: a publish would write among the input files", sink, source)
	case within(a, b):
		return fmt.Sprintf("%q contains the source path %s: a publish would replace the input with predictions", sink, source)
	}
	return ""
}

// realPath is p absolute and cleaned, with symlinks resolved as far as the
// path exists.
func realPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == filepath.Dir(dir) {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// within reports whether path p lies strictly inside directory dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func resolvePath(base, p string) string {
	if p == "" || filepath.IsAbs(p) || IsURL(p) {
		return p
	}
	return filepath.Join(base, p)
}

// IsURL reports whether a spec path is a URL ("scheme://…", an object-store
// location such as s3://bucket/prefix) rather than a local path. Which
// schemes are accepted is internal/objstore's to say, when it opens one.
func IsURL(p string) bool {
	i := strings.Index(p, "://")
	if i <= 0 {
		return false
	}
	for _, c := range p[:i] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// decoder turns a YAML node tree into a Spec strictly: unknown and duplicate
// fields, wrong kinds and bad values are collected as *SpecError with the
// field path and line, instead of stopping at the first one.
type decoder struct {
	file string
	env  func(string) (string, bool)
	errs []*SpecError
	// lines maps a field path to the line of its value.
	lines map[string]int
	// set holds the paths given a non-null value in the YAML, so that an
	// explicit 0 is told apart from an absent field when defaulting.
	set map[string]bool
	// errPath holds paths that already have an error, so validation does not
	// pile a second, derived complaint on them.
	errPath map[string]bool
	budget  int
	// templateParams collects the params the templates reference.
	templateParams map[string]bool
	// view is a read-only load (LoadForView): store fields need no
	// environment and their connection fields are never expanded.
	view bool
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) parseYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &SpecError{File: d.file, Msg: "empty job spec"}
		}
		return nil, d.yamlError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &SpecError{File: d.file, Line: extra.Line, Msg: "more than one YAML document (---); a job spec is a single document"}
	case !errors.Is(err, io.EOF):
		return nil, d.yamlError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, &SpecError{File: d.file, Msg: "empty job spec"}
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, &SpecError{File: d.file, Msg: "empty job spec"}
	}
	return root, nil
}

func (d *decoder) yamlError(err error) error {
	msg := err.Error()
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &SpecError{File: d.file, Line: line, Msg: "invalid YAML: " + msg, Err: err}
}

// fail records a problem at path, located at the line of path or of its
// nearest ancestor present in the YAML.
func (d *decoder) fail(path string, format string, args ...any) {
	for p := path; ; p = parentPath(p) {
		if d.errPath[p] {
			return
		}
		if p == "" {
			break
		}
	}
	d.failAt(path, d.lineOf(path), format, args...)
}

func (d *decoder) failAt(path string, line int, format string, args ...any) {
	if d.view && storePath(path) {
		return // a view does not connect: a store field's problem is the run's
	}
	d.errPath[path] = true
	d.errs = append(d.errs, &SpecError{File: d.file, Field: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) lineOf(path string) int {
	for p := path; ; p = parentPath(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
		if p == "" {
			return 0
		}
	}
}

// parentPath strips the last segment: a.b[3] → a.b, a["x.y"] → a, a.b → a.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndex(p, "["); i >= 0 {
			// A quoted key may contain '[': find the '[' that opens it.
			if j := strings.LastIndex(p, `["`); j >= 0 && strings.HasSuffix(p, `"]`) {
				i = j
			}
			return p[:i]
		}
	}
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func childPath(parent, key string) string {
	if !plainKeyRE.MatchString(key) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (d *decoder) joined() error {
	sort.SliceStable(d.errs, func(i, j int) bool {
		li, lj := d.errs[i].Line, d.errs[j].Line
		if li == 0 {
			li = int(^uint(0) >> 1)
		}
		if lj == 0 {
			lj = int(^uint(0) >> 1)
		}
		if li != lj {
			return li < lj
		}
		return d.errs[i].Field < d.errs[j].Field
	})
	shown := d.errs
	if len(shown) > maxProblems {
		shown = shown[:maxProblems]
	}
	errs := make([]error, len(shown), len(shown)+1)
	for i, e := range shown {
		errs[i] = e
	}
	if n := len(d.errs) - len(shown); n > 0 {
		errs = append(errs, &SpecError{File: d.file, Msg: fmt.Sprintf("... and %d more problems", n)})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decode stores n into v (addressable), recording lines, set paths and errors.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	line := n.Line
	for hops := 0; n.Kind == yaml.AliasNode; hops++ {
		if n.Alias == nil || hops > 100 {
			d.failAt(path, line, "unresolvable YAML alias")
			return
		}
		n = n.Alias
	}
	d.budget--
	if d.budget < 0 {
		if d.budget == -1 {
			d.failAt(path, line, "job spec too large: more than %d values (after alias expansion)", maxNodes)
		}
		return
	}
	d.lines[path] = line
	if isNull(n) {
		return
	}
	d.set[path] = true

	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if n.Kind != yaml.ScalarNode {
			d.failAt(path, line, "expected a single value, got %s", kindName(n))
			return
		}
		val, ok := d.expand(n.Value, path, line)
		if !ok {
			return
		}
		c := yaml.Node{Kind: yaml.ScalarNode, Value: val, Line: n.Line, Column: n.Column}
		if err := c.Decode(v.Addr().Interface()); err != nil {
			d.failAt(path, line, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.budget++ // the pointee is the same node
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.failAt(path, line, "expected a mapping of fields, got %s", kindName(n))
			return
		}
		fields := structFields(v.Type())
		d.entries(n, path, "field", func(key, fp string, k, val *yaml.Node) {
			idx, ok := fields[key]
			if !ok {
				d.failAt(fp, k.Line, "unknown field %q%s", key, suggest(key, fields))
				return
			}
			d.decode(val, v.Field(idx), fp)
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.failAt(path, line, "expected a mapping, got %s", kindName(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		d.entries(n, path, "key", func(key, fp string, _, val *yaml.Node) {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, elem, fp)
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
		})
	case reflect.Slice:
		if n.Kind == yaml.ScalarNode && v.Type() == reflect.TypeFor[TextColumns]() {
			// text: title is text: [title].
			n = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}, Line: n.Line, Column: n.Column}
		}
		if n.Kind != yaml.SequenceNode {
			d.failAt(path, line, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.failAt(path, line, "expected a string, got %s", kindName(n))
			return
		}
		if val, ok := d.expand(n.Value, path, line); ok {
			v.SetString(val)
		}
	case reflect.Int, reflect.Int64, reflect.Float64, reflect.Bool:
		want := map[reflect.Kind]string{reflect.Int: "an integer", reflect.Int64: "an integer", reflect.Float64: "a number", reflect.Bool: "true or false"}[v.Kind()]
		if n.Kind != yaml.ScalarNode {
			d.failAt(path, line, "expected %s, got %s", want, kindName(n))
			return
		}
		val, ok := d.expand(n.Value, path, line)
		if !ok {
			return
		}
		// Re-resolve as a plain scalar so that "${BATCH}" (a string until
		// expanded) and quoted numbers decode as numbers.
		c := yaml.Node{Kind: yaml.ScalarNode, Value: strings.TrimSpace(val)}
		if isNull(&c) {
			d.failAt(path, line, "expected %s, got %q", want, val)
			return
		}
		if err := c.Decode(v.Addr().Interface()); err != nil {
			d.failAt(path, line, "expected %s, got %q", want, val)
		}
	default:
		d.failAt(path, line, "internal error: cannot decode into %s", v.Type())
	}
}

// entries calls fn with each entry of the mapping n (a struct's fields or
// a map's keys, named by what) whose key decodes, and its path; a key
// given twice is reported at its second place and skipped.
func (d *decoder) entries(n *yaml.Node, path, what string, fn func(key, fp string, k, val *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key, ok := d.key(k, path)
		if !ok {
			continue
		}
		fp := childPath(path, key)
		if first, dup := seen[key]; dup {
			d.failAt(fp, k.Line, "duplicate %s (first given at line %d)", what, first)
			continue
		}
		seen[key] = k.Line
		fn(key, fp, k, val)
	}
}

// key returns a mapping key as a string; keys must be plain scalars.
func (d *decoder) key(k *yaml.Node, path string) (string, bool) {
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		d.failAt(path, k.Line, "mapping keys must be plain names, got %s", kindName(k))
		return "", false
	}
	if k.ShortTag() == "!!merge" {
		d.failAt(path, k.Line, "YAML merge keys (<<) are not supported; repeat the fields instead")
		return "", false
	}
	return k.Value, true
}

// structFields maps the yaml names of t's fields to their indexes.
func structFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = i
	}
	return m
}

// suggest names the closest known field, or lists them all.
func suggest(key string, fields map[string]int) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "") }
	best, bestD := "", 3
	for _, n := range names {
		if norm(n) == norm(key) {
			return fmt.Sprintf("; did you mean %q?", n)
		}
		if dist := editDistance(key, n); dist < bestD {
			best, bestD = n, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return " (known fields: " + strings.Join(names, ", ") + ")"
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
