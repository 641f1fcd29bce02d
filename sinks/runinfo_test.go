package sinks_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// A run's sinks are told the params the run recorded, not those of the spec
// at hand: a backfill day's run is published, aborted or cleaned under its
// own date even when the spec was loaded with another.
func TestNewRunInfoTakesTheRunsParams(t *testing.T) {
	spec := &jobs.Spec{Name: "daily", Params: map[string]string{"date": "2024-11-02"}}
	spec.Source.Key = "user_id"
	run := jobs.Run{ID: "daily-v1", Job: "daily", Version: "v1", Params: map[string]string{"date": "2024-11-01"}}
	out := arrow.NewSchema([]arrow.Field{{Name: "user_id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	got := sinks.NewRunInfo(spec, run, out)
	if !maps.Equal(got.Params, run.Params) {
		t.Errorf("params %v, want the run's %v (the spec was loaded with %v)", got.Params, run.Params, spec.Params)
	}
	if got.Job != "daily" || got.RunID != "daily-v1" || got.Version != "v1" || got.Key != "user_id" || got.Schema != out {
		t.Errorf("got %+v", got)
	}
	target := sinks.TargetInfo(spec)
	if !maps.Equal(target.Params, spec.Params) || target.Job != "daily" || target.Key != "user_id" || target.RunID != "" || target.Version != "" {
		t.Errorf("target %+v, want the spec's job, params and key with no run", target)
	}
}

// Every RunInfo outside the sinks is built by NewRunInfo or TargetInfo, so
// that no site picks its params (or leaves out the key) on its own. The
// sinks' own code and the benchmarks' synthetic runs, which have no spec,
// are exempt, as are tests.
func TestNoRunInfoBuiltByHand(t *testing.T) {
	root := ".."
	exempt := []string{"sinks", filepath.Join("cmd", "precog-bench")}
	fset := token.NewFileSet()
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			for _, e := range exempt {
				if rel == e {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if sel, ok := lit.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "RunInfo" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "sinks" {
					found = append(found, fset.Position(lit.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d files from %s: not the module's root?", files, root)
	}
	for _, at := range found {
		t.Errorf("%s: sinks.RunInfo built by hand; use sinks.NewRunInfo(spec, run, output) or sinks.TargetInfo(spec)", at)
	}
}
