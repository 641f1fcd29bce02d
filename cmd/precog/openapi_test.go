package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// openAPIFile is the lookup API's description, relative to the repository root.
const openAPIFile = "docs/openapi.yaml"

// openAPI is docs/openapi.yaml, decoded, with a JSON Schema compiler over
// it (OpenAPI 3.1's schemas are JSON Schema 2020-12).
type openAPI struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	// routes are the documented paths as patterns, in the document's order.
	routes []docRoute
}

type docRoute struct {
	template string
	re       *regexp.Regexp
}

const openAPIURL = "file:///openapi.json"

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, openAPIFile))
	if err != nil {
		t.Fatal(err)
	}
	var y any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("%s: not JSON-compatible: %v", openAPIFile, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(openAPIURL, doc); err != nil {
		t.Fatal(err)
	}
	o := &openAPI{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}}
	paths := o.doc["paths"].(map[string]any)
	templates := make([]string, 0, len(paths))
	for p := range paths {
		templates = append(templates, p)
	}
	sort.Strings(templates)
	for _, p := range templates {
		o.routes = append(o.routes, docRoute{template: p, re: templateRE(p)})
	}
	return o
}

// templateRE matches the paths a template describes: a {param} is one
// segment, except a last {key}, which is the rest of the path.
func templateRE(template string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	rest := template
	for {
		i := strings.Index(rest, "{")
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		j := strings.Index(rest, "}")
		b.WriteString(regexp.QuoteMeta(rest[:i]))
		if j == len(rest)-1 && i > 0 && rest[i-1] == '/' && rest[i+1:j] == "key" {
			b.WriteString(".+")
		} else {
			b.WriteString("[^/:]+")
		}
		rest = rest[j+1:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// route is the documented path template matching an escaped request path.
func (o *openAPI) route(path string) (string, bool) {
	for _, r := range o.routes {
		if r.re.MatchString(path) {
			return r.template, true
		}
	}
	return "", false
}

// schema compiles the schema at a JSON pointer of the document.
func (o *openAPI) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if s, ok := o.schemas[ptr]; ok {
		return s
	}
	s, err := o.compiler.Compile(openAPIURL + "#" + ptr)
	if err != nil {
		t.Fatalf("%s: compile %s: %v", openAPIFile, ptr, err)
	}
	o.schemas[ptr] = s
	return s
}

// resolve follows a "$ref" of the document ("#/components/…"), returning
// the object and its JSON pointer.
func (o *openAPI) resolve(v any, ptr string) (map[string]any, string) {
	m, _ := v.(map[string]any)
	for range 5 {
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		ptr = strings.TrimPrefix(ref, "#")
		var cur any = o.doc
		for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m, ptr
}

// escapePtr escapes a JSON pointer token.
func escapePtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// apiCase is one request and the status it must get.
type apiCase struct {
	name   string
	method string
	path   string // escaped
	token  bool
	body   string
	status int
	// header, when set, must be in the answer.
	header string
	// undocumented: a path no operation describes; only the error shape
	// (JSON {"error"}) is checked.
	undocumented bool
}

// checkAnswer holds an answer to the description: its operation documents
// the status, the body validates against the documented schema of its
// content type, and each documented header that is present matches its
// schema.
func (o *openAPI) checkAnswer(t *testing.T, c apiCase, resp *http.Response, body []byte) {
	t.Helper()
	where := fmt.Sprintf("%s (%s %s → %d)", c.name, c.method, c.path, resp.StatusCode)
	tmpl, ok := o.route(c.path)
	if !ok {
		t.Errorf("%s: no documented path matches %s", where, c.path)
		return
	}
	method := strings.ToLower(c.method)
	if method == "head" {
		method = "get"
	}
	opPtr := "/paths/" + escapePtr(tmpl) + "/" + method
	op, _ := o.doc["paths"].(map[string]any)[tmpl].(map[string]any)[method].(map[string]any)
	if op == nil {
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %s %s is not documented", where, c.method, tmpl)
		}
		return
	}
	responses := op["responses"].(map[string]any)
	rawResp, ok := responses[strconv.Itoa(resp.StatusCode)]
	if !ok {
		t.Errorf("%s: status %d is not documented for %s %s", where, resp.StatusCode, c.method, tmpl)
		return
	}
	r, rPtr := o.resolve(rawResp, opPtr+"/responses/"+strconv.Itoa(resp.StatusCode))
	if headers, ok := r["headers"].(map[string]any); ok {
		for name, h := range headers {
			v := resp.Header.Get(name)
			if v == "" {
				continue
			}
			hm, hPtr := o.resolve(h, rPtr+"/headers/"+escapePtr(name))
			if _, ok := hm["schema"]; ok {
				if err := o.schema(t, hPtr+"/schema").Validate(v); err != nil {
					t.Errorf("%s: header %s: %q: %v", where, name, v, err)
				}
			}
		}
	}
	if c.header != "" && resp.Header.Get(c.header) == "" {
		t.Errorf("%s: no %s header", where, c.header)
	}
	content, ok := r["content"].(map[string]any)
	if !ok || c.method == http.MethodHead {
		return
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", where, resp.Header.Get("Content-Type"), err)
		return
	}
	if _, ok := content[mt]; !ok {
		t.Errorf("%s: Content-Type %s is not documented (documented: %v)", where, mt, keys(content))
		return
	}
	s := o.schema(t, rPtr+"/content/"+escapePtr(mt)+"/schema")
	var v any = string(body)
	if mt == "application/json" {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			t.Errorf("%s: body is not JSON: %v\n%s", where, err, body)
			return
		}
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s: the body does not match the documented schema: %v\n%s", where, err, body)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// servedSpec is the demo's job as the lookup API serves it in the test:
// flagged stale after a second, and with a features table for live
// answers to a plain GET.
const servedSpecExtra = `
max_staleness: 1s
serving:
  features: { dsn: "${DATABASE_URL}", table: user_features }
  writeback_ttl: 1h
`

// TestOpenAPI holds docs/openapi.yaml to `precog serve` on real servers:
// each documented operation is called (the request examples of :predict
// included) and every answer's status, headers and body must be what the
// description says; every route the lookup package serves must be
// documented; and the file must pass a standard OpenAPI validator (npm's
// @apidevtools/swagger-parser, installed by scripts/install-servers.sh).
func TestOpenAPI(t *testing.T) {
	o := loadOpenAPI(t)
	t.Run("validator", func(t *testing.T) { validateOpenAPIWithNPM(t) })
	t.Run("routes", func(t *testing.T) { checkRoutesDocumented(t, o) })

	d := newDemo(t)
	job, err := os.ReadFile(filepath.Join(d.dir, "demo", "serve-jobs", "recs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeSpec(t, d.dir, "demo/serve-jobs/recs.yaml", string(job)+servedSpecExtra)
	cols := make([]string, 16)
	vals := make([]string, 16)
	for i := range cols {
		cols[i] = fmt.Sprintf("f%d real", i)
		vals[i] = fmt.Sprintf("%g", float64(i)/20-0.4)
	}
	d.pg.Exec(t, "CREATE TABLE user_features (user_id bigint PRIMARY KEY, "+strings.Join(cols, ", ")+")")
	d.pg.Exec(t, "INSERT INTO user_features VALUES (777777, "+strings.Join(vals, ", ")+")")

	addr := freeAddr(t)
	srv := exec.Command(precogBin, "serve", "--jobs", "demo/serve-jobs", "--addr", addr, "--max-body-bytes", "65536")
	srv.Dir = d.dir
	srv.Env = append(d.env, "PRECOG_API_TOKENS=tok")
	var logs bytes.Buffer
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("precog serve's log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	hc := &http.Client{Timeout: 10 * time.Second}
	call := func(c apiCase) (*http.Response, []byte) {
		t.Helper()
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequestWithContext(context.Background(), c.method, base+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawPath = c.path
		if c.token {
			req.Header.Set("Authorization", "Bearer tok")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		return resp, b
	}
	// Ready: wait for the event, bounded.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := hc.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("precog serve never became ready:\n%s", logs.String())
		}
	}

	big := `{"keys":["` + strings.Repeat("k", 70000) + `"]}`
	cases := []apiCase{
		{name: "get", method: "GET", path: "/v1/predictions/recs/42", token: true, status: 200},
		{name: "head", method: "HEAD", path: "/v1/predictions/recs/42", token: true, status: 200},
		{name: "get from the features table, live", method: "GET", path: "/v1/predictions/recs/777777", token: true, status: 200},
		{name: "get a key no store has", method: "GET", path: "/v1/predictions/recs/no-such-user", token: true, status: 404},
		{name: "get an unknown namespace", method: "GET", path: "/v1/predictions/nope/42", token: true, status: 404},
		{name: "get without a token", method: "GET", path: "/v1/predictions/recs/42", status: 401, header: "WWW-Authenticate"},
		{name: "get a key over 512 bytes", method: "GET", path: "/v1/predictions/recs/" + strings.Repeat("k", 600), token: true, status: 400},
		{name: "post to a key", method: "POST", path: "/v1/predictions/recs/42", token: true, body: "{}", status: 405, header: "Allow"},
		{name: "batchGet", method: "POST", path: "/v1/predictions/recs:batchGet", token: true, body: `{"keys":["42",43,"no-such-user",""]}`, status: 200},
		{name: "batchGet, bad body", method: "POST", path: "/v1/predictions/recs:batchGet", token: true, body: `{"keys":`, status: 400},
		{name: "batchGet, too large", method: "POST", path: "/v1/predictions/recs:batchGet", token: true, body: big, status: 413},
		{name: "batchGet by GET", method: "GET", path: "/v1/predictions/recs:batchGet", token: true, status: 405, header: "Allow"},
		{name: "batchGet without a token", method: "POST", path: "/v1/predictions/recs:batchGet", body: `{"keys":["42"]}`, status: 401},
		{name: "an unknown operation", method: "POST", path: "/v1/predictions/recs:nope", token: true, body: "{}", status: 404, undocumented: true},
		{name: "predict, stored", method: "POST", path: "/v1/predictions/recs:predict", token: true, body: `{"key":"42"}`, status: 200},
		{name: "predict, no inputs", method: "POST", path: "/v1/predictions/recs:predict", token: true, body: `{"key":"no-such-user"}`, status: 404},
		{name: "predict, short inputs", method: "POST", path: "/v1/predictions/recs:predict", token: true, body: `{"key":"x1","inputs":{"features":[1,2]}}`, status: 400},
		{name: "namespace", method: "GET", path: "/v1/namespaces/recs", token: true, status: 200},
		{name: "an unknown namespace's metadata", method: "GET", path: "/v1/namespaces/nope", token: true, status: 404},
		{name: "namespace without a token", method: "GET", path: "/v1/namespaces/recs", status: 401, header: "WWW-Authenticate"},
		{name: "namespace by POST", method: "POST", path: "/v1/namespaces/recs", token: true, body: "{}", status: 405, header: "Allow"},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "healthz by POST", method: "POST", path: "/healthz", status: 405},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", status: 200},
		{name: "an unknown path", method: "GET", path: "/v2/nope", status: 404, undocumented: true},
	}
	// The :predict examples of the description are real requests.
	predict := o.doc["paths"].(map[string]any)["/v1/predictions/{namespace}:predict"].(map[string]any)["post"].(map[string]any)
	examples := predict["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["examples"].(map[string]any)
	for _, name := range []string{"inputs", "columns"} {
		ex, ok := examples[name].(map[string]any)
		if !ok {
			t.Fatalf("%s: no :predict example %q", openAPIFile, name)
		}
		b, _ := json.Marshal(ex["value"])
		cases = append(cases, apiCase{name: "predict example " + name, method: "POST", path: "/v1/predictions/recs:predict", token: true, body: string(b), status: 200})
	}

	ok2xx := map[string]bool{}
	for _, c := range cases {
		resp, body := call(c)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %s %s: status %d, want %d: %s", c.name, c.method, c.path, resp.StatusCode, c.status, body)
		}
		if c.undocumented {
			var e struct{ Error string }
			if json.Unmarshal(body, &e) != nil || e.Error == "" {
				t.Errorf("%s: not a JSON error: %s", c.name, body)
			}
			continue
		}
		o.checkAnswer(t, c, resp, body)
		if tmpl, ok := o.route(c.path); ok && resp.StatusCode < 300 {
			ok2xx[strings.ToLower(c.method)+" "+tmpl] = true
		}
		if strings.HasPrefix(c.name, "predict example") {
			var p struct{ Source string }
			if json.Unmarshal(body, &p) != nil || p.Source != "live" {
				t.Errorf("%s: not answered live: %s", c.name, body)
			}
		}
	}
	for _, r := range o.routes {
		for method := range o.doc["paths"].(map[string]any)[r.template].(map[string]any) {
			if method == "parameters" {
				continue
			}
			if !ok2xx[method+" "+r.template] {
				t.Errorf("%s %s: documented but never answered 2xx here (add a case)", strings.ToUpper(method), r.template)
			}
		}
	}

	// The staleness header: the demo's records become older than the
	// served spec's max_staleness (1s); wait for that, bounded.
	stale := apiCase{name: "get, stale", method: "GET", path: "/v1/predictions/recs/42", token: true, status: 200, header: "X-Precog-Stale-Age"}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, body := call(stale)
		if resp.Header.Get("X-Precog-Stale-Age") != "" {
			o.checkAnswer(t, stale, resp, body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GET never carried X-Precog-Stale-Age, 20 s after a run of a job with max_staleness: 1s")
		}
	}
}

// validateOpenAPIWithNPM runs the npm validator over the description. It
// is skipped where node or its install is missing, except under CI=true.
func validateOpenAPIWithNPM(t *testing.T) {
	dir := filepath.Join(repoRoot, "scripts", "openapi")
	_, errNode := exec.LookPath("node")
	_, errMod := os.Stat(filepath.Join(dir, "node_modules", "@apidevtools", "swagger-parser", "package.json"))
	if errNode != nil || errMod != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the OpenAPI validator is not installed (make servers installs it: scripts/install-servers.sh): %v %v", errNode, errMod)
		}
		t.Skip("node or scripts/openapi/node_modules missing (make servers installs them)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", filepath.Join(dir, "validate.mjs"), filepath.Join(repoRoot, openAPIFile)).CombinedOutput()
	if err != nil {
		t.Fatalf("%s does not validate: %v\n%s", openAPIFile, err, out)
	}
	t.Logf("%s", out)
}

// routeLiteralRE finds what a router matches in Go source: a path ("/healthz",
// "/v1/predictions/") or a method pattern ("GET /v1/namespaces/{namespace}").
var routeLiteralRE = regexp.MustCompile(`^(?:(?:GET|POST|PUT|PATCH|DELETE|HEAD) )?(/[A-Za-z0-9_.{}:/-]+)$`)

// checkRoutesDocumented: every path literal of package lookup's code (what
// its router compares request paths with) is a documented path or the
// fixed start of one, so an endpoint added to the router without a line in
// the description fails here.
func checkRoutesDocumented(t *testing.T, o *openAPI) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(repoRoot, "lookup", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		check := func(e ast.Expr) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return
			}
			m := routeLiteralRE.FindStringSubmatch(s)
			if m == nil {
				return
			}
			found++
			if !o.documents(m[1]) {
				t.Errorf("%s: the router serves %q, which %s does not document", fset.Position(lit.Pos()), s, openAPIFile)
			}
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CaseClause: // switch path { case "/healthz": … }
				for _, e := range x.List {
					check(e)
				}
			case *ast.GenDecl: // const predictionsPrefix = "/v1/predictions/"
				if x.Tok == token.CONST {
					for _, s := range x.Specs {
						for _, e := range s.(*ast.ValueSpec).Values {
							check(e)
						}
					}
				}
			case *ast.CallExpr: // mux.HandleFunc("GET /…", h), strings.CutPrefix(path, "/…")
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && routeFuncs[sel.Sel.Name] {
					for _, e := range x.Args {
						check(e)
					}
				}
			}
			return true
		})
	}
	if found < 4 {
		t.Fatalf("only %d route literals found in package lookup: has the router moved?", found)
	}
}

// routeFuncs are the calls whose string arguments are routes.
var routeFuncs = map[string]bool{"Handle": true, "HandleFunc": true, "CutPrefix": true, "HasPrefix": true, "TrimPrefix": true}

// documents reports whether p, a path or path pattern of the code, is a
// documented path template or the fixed start of one.
func (o *openAPI) documents(p string) bool {
	for _, r := range o.routes {
		if r.template == p || strings.HasPrefix(r.template, p) || r.re.MatchString(p) {
			return true
		}
	}
	return false
}
