// Package docgen generates and checks precog's documentation: the job spec
// reference from package jobs, each page's table of contents, and the
// links and runnable shell blocks of the Markdown pages, so that what the
// docs say is held to the code by tests (cmd/precog's docs_test.go).
package docgen

import (
	"fmt"
	"regexp"
	"strings"
)

// Heading is one Markdown heading outside code.
type Heading struct {
	Level int
	Text  string
	// Anchor is the id GitHub gives the heading (see Slug), made unique
	// within the page with -1, -2… as GitHub does.
	Anchor string
}

// Link is one Markdown link or image outside code.
type Link struct {
	Target string
	Line   int
}

// Block is one fenced code block.
type Block struct {
	// Info is the fence's info string ("sh {run}").
	Info string
	Body string
	Line int
}

// Run reports whether the block is marked to run in the test suite
// (```sh {run}).
func (b Block) Run() bool {
	f := strings.Fields(b.Info)
	return len(f) >= 2 && f[0] == "sh" && f[1] == "{run}"
}

var (
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// linkRE finds [text](target) and ![alt](target); the target ends at
	// the first space (a title may follow) or the closing parenthesis.
	linkRE       = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	slugDropRE   = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// Slug is GitHub's anchor for a heading's text: lower case, markup and
// punctuation other than - and _ dropped, spaces made -.
func Slug(text string) string {
	s := strings.ToLower(inlineCodeRE.ReplaceAllStringFunc(text, func(c string) string { return strings.Trim(c, "`") }))
	s = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(s, "$1")
	s = slugDropRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// Parsed is a Markdown page split into what the checks need.
type Parsed struct {
	Headings []Heading
	Links    []Link
	Blocks   []Block
}

// Parse reads headings, links and fenced blocks of a page. Links and
// headings inside fenced blocks or inline code are not links or headings.
func Parse(md string) Parsed {
	var p Parsed
	seen := map[string]int{}
	var fence *Block
	var fenceMark string
	for i, line := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(line)
		if fence != nil {
			if strings.HasPrefix(trim, fenceMark) && strings.Trim(trim, fenceMark[:1]) == "" {
				p.Blocks = append(p.Blocks, *fence)
				fence = nil
				continue
			}
			fence.Body += line + "\n"
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			mark := trim[:3]
			for len(mark) < len(trim) && trim[len(mark)] == mark[0] {
				mark += mark[:1]
			}
			fence, fenceMark = &Block{Info: strings.TrimSpace(trim[len(mark):]), Line: i + 1}, mark
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := Slug(m[2])
			if n := seen[a]; n > 0 {
				seen[a] = n + 1
				a = fmt.Sprintf("%s-%d", a, n)
			} else {
				seen[a] = 1
			}
			p.Headings = append(p.Headings, Heading{Level: len(m[1]), Text: m[2], Anchor: a})
		}
		for _, m := range linkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(line, ""), -1) {
			p.Links = append(p.Links, Link{Target: m[1], Line: i + 1})
		}
	}
	return p
}

// Anchors is the set of a page's heading anchors.
func (p Parsed) Anchors() map[string]bool {
	m := make(map[string]bool, len(p.Headings))
	for _, h := range p.Headings {
		m[h.Anchor] = true
	}
	return m
}

// TOC markers: a page's table of contents is generated between them.
const (
	TOCOpen  = "<!-- toc -->"
	TOCClose = "<!-- /toc -->"
)

// FillTOC returns md with the lines between its TOC markers replaced by a
// list of its ## and ### headings, linked; md unchanged when it has none.
func FillTOC(md string) string {
	i := strings.Index(md, TOCOpen)
	j := strings.Index(md, TOCClose)
	if i < 0 || j < i {
		return md
	}
	var b strings.Builder
	for _, h := range Parse(md).Headings {
		if h.Level < 2 || h.Level > 3 {
			continue
		}
		fmt.Fprintf(&b, "%s- [%s](#%s)\n", strings.Repeat("  ", h.Level-2), h.Text, h.Anchor)
	}
	return md[:i] + TOCOpen + "\n" + b.String() + md[j:]
}
