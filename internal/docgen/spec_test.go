package docgen

import (
	"reflect"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
)

// Every field of jobs.Spec, found by reflection over its yaml tags, has a
// row of the reference with a description, and every note in fieldNotes
// names a field that exists (a renamed field leaves no stale note).
func TestSpecReferenceComplete(t *testing.T) {
	md, err := SpecReference("../../jobs")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| `") {
			cells := strings.Split(line, " | ")
			rows[strings.Trim(cells[0], "| `")] = line
		}
	}
	paths := specPaths(reflect.TypeOf(jobs.Spec{}), "")
	if len(paths) < 60 {
		t.Fatalf("only %d spec fields found by reflection", len(paths))
	}
	for _, p := range paths {
		row, ok := rows[p]
		if !ok {
			t.Errorf("%s: no row in the reference", p)
			continue
		}
		if strings.HasSuffix(row, "|  |") {
			t.Errorf("%s: no description (add a doc comment in package jobs or a note in fielddocs.go)", p)
		}
	}
	known := map[string]bool{}
	for _, p := range paths {
		known[p] = true
	}
	for p := range fieldNotes {
		if !known[p] {
			t.Errorf("fieldNotes[%q]: no such spec field", p)
		}
	}
	for p, want := range map[string]string{
		"model.batch_size":       "`1024`",
		"sinks.redis.timeout":    "`5s`",
		"checks.sample_size":     "`2000`",
		"max_rejected_fraction":  "`0.01`",
		"source.key":             "**required**",
		"sinks.postgres.mode":    "`replace`",
		"retry.transient_window": "`1m`",
	} {
		if !strings.Contains(rows[p], " | "+want+" | ") {
			t.Errorf("%s: default %s not shown: %s", p, want, rows[p])
		}
	}
	if !strings.Contains(rows["sinks.postgres.mode"], "`replace`, `upsert`") {
		t.Errorf("sinks.postgres.mode: allowed values not shown: %s", rows["sinks.postgres.mode"])
	}
}

// specPaths lists the yaml path of every field of t, nested blocks
// included (a map's entries as <name>).
func specPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		p := join(prefix, name)
		out = append(out, p)
		if et, ok := blockType(f.Type); ok {
			if f.Type.Kind() == reflect.Map {
				p += ".<name>"
			}
			out = append(out, specPaths(et, p)...)
		}
	}
	return out
}
