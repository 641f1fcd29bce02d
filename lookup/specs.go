package lookup

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/precog-ml/precog/jobs"
)

// servingPlaceholder renders the templates of run parameters a served spec
// was not given. Templates only appear in batch-only fields (source paths
// and queries, the Parquet sink's path), which serving never reads: the
// published version in Redis tells the API what to read.
const servingPlaceholder = "unset-when-serving"

// templateParamRE finds the {{.name}} references of a spec's text.
var templateParamRE = regexp.MustCompile(`\{\{-?\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}`)

// LoadServingSpec loads a job spec for serving. params are optional: a
// template naming a param not given (e.g. source.parquet.path's {{.date}})
// is rendered with a placeholder, since it only matters to a batch run. Any
// other problem of the spec fails as jobs.Load reports it. The returned
// spec's Params are the given params only.
func LoadServingSpec(path string, params map[string]string) (*jobs.Spec, error) {
	spec, err := jobs.Load(path, params)
	if err == nil {
		return spec, nil
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return nil, err
	}
	filled := maps.Clone(params)
	if filled == nil {
		filled = map[string]string{}
	}
	missing := false
	for _, m := range templateParamRE.FindAllSubmatch(data, -1) {
		if _, ok := filled[string(m[1])]; !ok {
			filled[string(m[1])] = servingPlaceholder
			missing = true
		}
	}
	if !missing {
		return nil, err
	}
	spec, err = jobs.Load(path, filled)
	if err != nil {
		return nil, err
	}
	spec.Params = maps.Clone(params)
	return spec, nil
}

// loadSpecs loads every *.yaml / *.yml of dir for serving, in name order.
func loadSpecs(dir string, params map[string]string) ([]*jobs.Spec, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lookup: jobs dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var specs []*jobs.Spec
	for _, name := range names {
		spec, err := LoadServingSpec(filepath.Join(dir, name), params)
		if err != nil {
			return nil, fmt.Errorf("lookup: %w", err)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}
