package docgen

import (
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Cleaning up: precog gc":                 "cleaning-up-precog-gc",
		"1. Images":                              "1-images",
		"The `:predict` body":                    "the-predict-body",
		"A run's guarantees":                     "a-runs-guarantees",
		"sinks.redis":                            "sinksredis",
		"Text models, string_features (v1)":      "text-models-string_features-v1",
		"Redis record encoding: json or msgpack": "redis-record-encoding-json-or-msgpack",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSkipsCode(t *testing.T) {
	md := "# T\n\nsee [a](a.md) and `[b](b.md)`\n\n```sh {run}\n# not a heading\necho [c](c.md)\n```\n\n## T\n## T\n"
	p := Parse(md)
	if len(p.Links) != 1 || p.Links[0].Target != "a.md" || p.Links[0].Line != 3 {
		t.Errorf("links = %+v, want only a.md on line 3", p.Links)
	}
	var anchors []string
	for _, h := range p.Headings {
		anchors = append(anchors, h.Anchor)
	}
	if got := strings.Join(anchors, ","); got != "t,t-1,t-2" {
		t.Errorf("anchors = %s, want t,t-1,t-2", got)
	}
	if len(p.Blocks) != 1 || !p.Blocks[0].Run() || p.Blocks[0].Body != "# not a heading\necho [c](c.md)\n" {
		t.Errorf("blocks = %+v", p.Blocks)
	}
}

func TestFillTOC(t *testing.T) {
	md := "# Page\n\n" + TOCOpen + "\nstale\n" + TOCClose + "\n\n## One\n\n### Sub `x`\n\n#### deep\n\n## Two\n"
	got := FillTOC(md)
	want := "# Page\n\n" + TOCOpen + "\n- [One](#one)\n  - [Sub `x`](#sub-x)\n- [Two](#two)\n" + TOCClose + "\n\n## One\n\n### Sub `x`\n\n#### deep\n\n## Two\n"
	if got != want {
		t.Errorf("FillTOC:\n%s\nwant:\n%s", got, want)
	}
	if FillTOC(got) != got {
		t.Error("FillTOC is not idempotent")
	}
}
