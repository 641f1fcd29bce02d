package jobs

import (
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

// renderTemplates fills {{.param}} in the fields where a run parameter is
// plausible: the source path or query, the Parquet output path and the
// Redis namespace (its charset checked once rendered). Only
// plain substitutions are allowed (no functions, conditionals or loops), so
// a template can neither misbehave nor hide which params it needs.
func (d *decoder) renderTemplates(s *Spec) {
	if d.templateParams == nil {
		d.templateParams = map[string]bool{}
	}
	if p := s.Source.Parquet; p != nil {
		p.Path = d.render("source.parquet.path", p.Path, s.Params)
	}
	if p := s.Source.Postgres; p != nil {
		p.Query = d.render("source.postgres.query", p.Query, s.Params)
	}
	if p := s.Sinks.Parquet; p != nil {
		p.Path = d.render("sinks.parquet.path", p.Path, s.Params)
	}
	if r := s.Sinks.Redis; r != nil && strings.Contains(r.Namespace, "{{") {
		raw := r.Namespace
		r.Namespace = d.render("sinks.redis.namespace", raw, s.Params)
		if r.Namespace != raw && !namespaceRE.MatchString(r.Namespace) {
			d.fail("sinks.redis.namespace", "%q (rendered from %q) must be 1 to 128 of [A-Za-z0-9_.-]", r.Namespace, raw)
		}
	}
	names := make([]string, 0, len(d.templateParams))
	for n := range d.templateParams {
		names = append(names, n)
	}
	sort.Strings(names)
	s.templateParams = names
}

// render renders one field's template; on a problem it records it and
// returns the text unchanged.
func (d *decoder) render(path, text string, params map[string]string) string {
	if !strings.Contains(text, "{{") {
		return text
	}
	t, err := template.New(path).Parse(text)
	if err != nil {
		msg := err.Error()
		// "template: source.parquet.path:1: unexpected ..." → "1: unexpected ..."
		msg = strings.TrimPrefix(msg, "template: "+path+":")
		d.fail(path, "invalid template: %s", msg)
		return text
	}
	if len(t.Templates()) > 1 || t.Tree == nil || t.Tree.Root == nil {
		d.fail(path, "only {{.param}} substitutions are supported (no define or block)")
		return text
	}
	var b strings.Builder
	ok := true
	for _, node := range t.Tree.Root.Nodes {
		switch n := node.(type) {
		case *parse.TextNode:
			b.Write(n.Text)
		case *parse.CommentNode:
		case *parse.ActionNode:
			name, plain := paramRef(n)
			if !plain {
				d.fail(path, "template %s: only {{.param}} substitutions are supported", quoteShort(n.String()))
				ok = false
				continue
			}
			d.templateParams[name] = true
			v, given := params[name]
			if !given {
				d.fail(path, "template uses param %q, which was not given: pass --param %s=...", name, name)
				ok = false
				continue
			}
			b.WriteString(v)
		default:
			d.fail(path, "template %s: only {{.param}} substitutions are supported", quoteShort(node.String()))
			ok = false
		}
	}
	if !ok {
		return text
	}
	return b.String()
}

// paramRef reports the param name of a plain {{.name}} action.
func paramRef(a *parse.ActionNode) (string, bool) {
	p := a.Pipe
	if p == nil || len(p.Decl) > 0 || p.IsAssign || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return "", false
	}
	f, ok := p.Cmds[0].Args[0].(*parse.FieldNode)
	if !ok || len(f.Ident) != 1 {
		return "", false
	}
	return f.Ident[0], true
}
