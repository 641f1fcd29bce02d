package main

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/precog-ml/precog/internal/docgen"
	"github.com/precog-ml/precog/jobs"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// updateDocs (PRECOG_UPDATE_DOCS=1, `make docs`) makes TestDocsGenerated
// rewrite the generated documentation instead of failing on it.
var updateDocs = os.Getenv("PRECOG_UPDATE_DOCS") == "1"

// docPages is every Markdown page of the documentation, relative to the
// repository root: README.md, ARCHITECTURE.md and docs/ with its subfolders.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "ARCHITECTURE.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages[2:])
	return pages
}

func readPage(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsLinks: every link of the documentation points at a file (and,
// with #anchor, a heading) that is in the repository, or at an external
// project over https; none leaves the repository by a relative path
// (../shared/DESIGN.md was one) or points at this repository's own
// hosting, which would show another version of the file.
func TestDocsLinks(t *testing.T) {
	parsed := map[string]docgen.Parsed{}
	parse := func(page string) docgen.Parsed {
		if p, ok := parsed[page]; ok {
			return p
		}
		p := docgen.Parse(readPage(t, page))
		parsed[page] = p
		return p
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, page := range docPages(t) {
		for _, l := range parse(page).Links {
			links++
			where := page + ":" + strconv.Itoa(l.Line) + ": " + l.Target
			if u, err := url.Parse(l.Target); err == nil && u.Scheme != "" {
				switch {
				case u.Scheme == "mailto":
				case u.Scheme != "https" && u.Scheme != "http":
					t.Errorf("%s: scheme %q", where, u.Scheme)
				case u.Host == "github.com" && strings.HasPrefix(strings.ToLower(u.Path), "/precog-ml/precog"):
					t.Errorf("%s: a link to this repository's hosting; link the file relatively", where)
				case u.Host == "localhost" || strings.HasPrefix(u.Host, "127.") || strings.HasPrefix(u.Host, "localhost:"):
					t.Errorf("%s: a link to a local server is not a page", where)
				}
				continue
			}
			file, anchor, _ := strings.Cut(l.Target, "#")
			target := page
			if file != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				abs, _ := filepath.Abs(filepath.Join(repoRoot, target))
				if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: leaves the repository", where)
					continue
				}
				st, err := os.Stat(abs)
				if err != nil {
					t.Errorf("%s: no such file in the repository", where)
					continue
				}
				if st.IsDir() || !strings.HasSuffix(target, ".md") {
					if anchor != "" {
						t.Errorf("%s: an anchor into a file that is not Markdown", where)
					}
					continue
				}
			}
			if anchor != "" && !parse(target).Anchors()[anchor] {
				t.Errorf("%s: %s has no heading with anchor #%s", where, target, anchor)
			}
		}
	}
	if links < 50 {
		t.Fatalf("only %d links found in the docs: is the parser broken?", links)
	}
}

// TestDocsGenerated: the generated parts of the documentation are what the
// generators make of the current code: docs/spec.md (from package jobs),
// docs/cli/ (cobra's Markdown of the command tree) and each page's table
// of contents. PRECOG_UPDATE_DOCS=1 (make docs) rewrites them instead.
func TestDocsGenerated(t *testing.T) {
	want := map[string]string{}
	spec, err := docgen.SpecReference(filepath.Join(repoRoot, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	want["docs/spec.md"] = docgen.FillTOC(spec)
	cli := cliReference(t)
	for name, content := range cli {
		want["docs/cli/"+name] = content
	}
	for _, page := range docPages(t) {
		if _, generated := want[page]; generated {
			continue
		}
		if strings.HasPrefix(page, "docs/cli/") {
			t.Errorf("%s: no command generates it; remove it (make docs does)", page)
			if updateDocs {
				_ = os.Remove(filepath.Join(repoRoot, page))
			}
			continue
		}
		md := readPage(t, page)
		if toc := docgen.FillTOC(md); toc != md {
			want[page] = toc
		}
	}
	checkGenerated(t, want)
}

// cliReference is cobra's Markdown reference of the command tree, one page
// per command, by file name. The defaults the environment can change
// (--state-dir, --db) are generated with those variables unset.
func cliReference(t *testing.T) map[string]string {
	t.Helper()
	t.Setenv("PRECOG_STATE_DIR", "")
	t.Setenv(envDatabaseURL, "")
	root := newRoot(&globals{})
	root.DisableAutoGenTag = true
	dir := t.TempDir()
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	if len(out) < 20 {
		t.Fatalf("the CLI reference has %d pages: is the command tree complete?", len(out))
	}
	return out
}

// TestReadmeListsEveryCommand: the README's command table has a line for
// every command of the tree (diff and publish were missing once), and the
// spec reference names every field of the spec.
func TestReadmeListsEveryCommand(t *testing.T) {
	// The rows of the table under the README's "Commands" heading: the
	// first cell of each, up to the next heading.
	var table strings.Builder
	in := false
	for _, line := range strings.Split(readPage(t, "README.md"), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
			in = strings.TrimSpace(strings.TrimLeft(line, "#")) == "Commands"
		case in && strings.HasPrefix(line, "| `"):
			first, _, _ := strings.Cut(line[1:], " |")
			table.WriteString(first + "\n")
		}
	}
	if table.Len() == 0 {
		t.Fatal("README.md has no Commands heading with a table of commands")
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if sub.HasSubCommands() && sub.Runnable() == false {
				walk(sub)
				continue
			}
			if !strings.Contains(table.String(), "`"+sub.CommandPath()) {
				t.Errorf("README.md's Commands table has no line for `%s`", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRoot(&globals{}))
}

// checkGenerated compares each file (relative to the repository root) with
// its wanted content, or writes it under PRECOG_UPDATE_DOCS=1.
func checkGenerated(t *testing.T, want map[string]string) {
	t.Helper()
	for page, content := range want {
		path := filepath.Join(repoRoot, page)
		if updateDocs {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("%s is not current: run `make docs` (PRECOG_UPDATE_DOCS=1 go test ./cmd/precog -run TestDocsGenerated)", page)
		}
	}
}

// TestDocsSpecsParse: every YAML block of the docs that is a whole job
// spec (it has a top-level name:) parses and validates, so a field renamed
// in package jobs cannot linger in an example.
func TestDocsSpecsParse(t *testing.T) {
	env := func(name string) (string, bool) {
		switch {
		case strings.Contains(name, "REDIS"):
			return "localhost:6379", true
		case strings.Contains(name, "URL") || strings.Contains(name, "DSN"):
			return "postgres://u@localhost/db", true
		}
		return "x", true
	}
	n := 0
	for _, page := range docPages(t) {
		for _, b := range docgen.Parse(readPage(t, page)).Blocks {
			if b.Info != "yaml" || !regexp.MustCompile(`(?m)^name: `).MatchString(b.Body) {
				continue
			}
			n++
			if _, err := jobs.Parse([]byte(b.Body), "", map[string]string{"date": "2026-11-01"}, env); err != nil {
				t.Errorf("%s:%d: the job spec does not parse:\n%v", page, b.Line, err)
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d job specs found in the docs' yaml blocks", n)
	}
}

// TestDocsShape: the README stays a front page (at most 12 KB, the rest in
// docs/), and every long page of docs/ has a generated table of contents.
func TestDocsShape(t *testing.T) {
	const maxReadme = 12 << 10
	if n := len(readPage(t, "README.md")); n > maxReadme {
		t.Errorf("README.md is %d bytes, over %d: move detail into a docs/ page", n, maxReadme)
	}
	for _, page := range docPages(t) {
		if !strings.HasPrefix(page, "docs/") || strings.HasPrefix(page, "docs/cli/") {
			continue
		}
		md := readPage(t, page)
		if strings.Count(md, "\n") > 80 && !strings.Contains(md, docgen.TOCOpen) {
			t.Errorf("%s: %d lines and no table of contents (add %s %s after the intro)", page, strings.Count(md, "\n"), docgen.TOCOpen, docgen.TOCClose)
		}
	}
}
