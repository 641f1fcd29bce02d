package jobs

import "github.com/apache/arrow-go/v18/arrow"

// The bookkeeping columns every output record carries after the model's
// outputs (and before the run params): a spec may not name an output so.
const (
	ColModelVersion = "model_version"
	ColComputedAt   = "computed_at"
)

// OutputTail is the bookkeeping fields of every output schema, in order:
// the model version as text and the time the row was computed (UTC, µs).
func OutputTail() []arrow.Field {
	return []arrow.Field{
		{Name: ColModelVersion, Type: arrow.BinaryTypes.String},
		{Name: ColComputedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}
}
