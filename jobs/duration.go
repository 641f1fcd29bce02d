package jobs

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML reads a Go duration string ("48h", "90s", "1h30m"); a bare
// number is refused because its unit would be a guess.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as \"48h\" or \"90s\", got a %s", nodeKindWord(value))
	}
	s := strings.TrimSpace(value.Value)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: write a number with a unit, such as \"48h\", \"90s\" or \"1h30m\" (units: ms, s, m, h)", value.Value)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration back as a string ("48h0m0s"), so that a
// marshalled spec reads back and hashes stably.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

func nodeKindWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "non-scalar value"
	}
}
