// Package store keeps profiles over time and answers queries over them.
// Two backends implement Store: SQLite, embedded (one file, WAL, one agent
// per data directory), and ClickHouse, shared by a fleet's agents and
// flint server (optionally sharded). docs/STORE.md describes both formats.
//
//	st, err := store.Open("/var/lib/flint", store.DefaultOptions())                           // SQLite in the data directory
//	st, err := store.OpenClickHouse(ctx, "clickhouse://ch:8123/flint", store.DefaultOptions()) // ClickHouse
package store

import (
	"context"
	"errors"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
)

// Sentinel errors callers branch on.
var (
	// ErrTooLarge reports a query beyond the documented limits (range,
	// distinct stacks, series points); the message says which.
	ErrTooLarge = errors.New("query too large")
	// ErrLocked reports a data directory already used by another agent.
	ErrLocked = errors.New("data directory in use by another flint agent")
	// ErrBadQuery reports an invalid query (empty or inverted range, bad step).
	ErrBadQuery = errors.New("bad query")
)

// Reader answers queries over stored profiles: what the API needs.
type Reader interface {
	// Profile merges the samples of type q.Type of windows starting in
	// [q.From, q.To) whose labels match q.Selector. Sample labels keep only
	// the labels named in q.KeepLabels (nil: all). The profile's Kind is
	// q.Type; its Period is the shortest CPU sampling period of the
	// range's windows for CPU (the counts of windows sampled less often
	// converted to it), 1 ns (counts are nanoseconds) for off-CPU and wall.
	Profile(ctx context.Context, q Query) (*profile.Profile, error)
	// Series sums the counts of type q.Type per q.Step per value of the
	// label q.By: samples for CPU, in the period Profile's would have,
	// nanoseconds for off-CPU and wall; the answer's Period says which.
	Series(ctx context.Context, q SeriesQuery) (SeriesSet, error)
	// LabelNames lists the label names seen in [from, to).
	LabelNames(ctx context.Context, from, to time.Time) ([]string, error)
	// LabelValues lists the values of one label seen in [from, to).
	LabelValues(ctx context.Context, name string, from, to time.Time) ([]string, error)
	// Findings returns the findings of examinations starting in
	// [q.From, q.To) whose labels match q.Selector, oldest first; more than
	// Options.MaxFindings fail with ErrTooLarge. q.KeepLabels is ignored.
	Findings(ctx context.Context, q Query) ([]Finding, error)
}

// Store keeps profiles. Implementations are safe for concurrent use.
type Store interface {
	Reader
	// Write stores one window: p.Start and p.Duration place it in time,
	// p.Kind (CPU or OffCPU) is its type, and every sample carries its full
	// label set. A CPU window and an off-CPU window may share a start.
	Write(ctx context.Context, p *profile.Profile) error
	// WriteFindings stores the findings of one examination in one
	// transaction.
	WriteFindings(ctx context.Context, fs []Finding) error
	// Close flushes and releases the store; safe to call twice.
	Close() error
}

// Query selects samples.
type Query struct {
	From, To   time.Time
	Selector   selector.Selector
	KeepLabels []string
	// Type is the profile type: CPU (the zero value), OffCPU, or Wall,
	// which the store answers as CPU time plus off-CPU time.
	Type profile.Kind
}

// SeriesQuery selects samples and groups them over time.
type SeriesQuery struct {
	Query
	By   string        // label to group by, e.g. "comm"
	Step time.Duration // bucket width
}

// SeriesSet is the answer to a series query.
type SeriesSet struct {
	// Period is the time one count stands for: for CPU the shortest
	// sampling period of the range's CPU windows, as Profile's (0 when the
	// range has none of known period), 1 ns for off-CPU and wall.
	Period time.Duration
	Series []Series
}

// Series is one label value's samples over time.
type Series struct {
	Value  string  `json:"value"`
	Points []Point `json:"points"`
}

// Finding is one problem flint doctor found in one examination. The store
// keeps Body, the finding as JSON, as it is; Detector and Severity are
// copies of its fields, for reading without decoding it.
type Finding struct {
	Start    time.Time // the examination's span
	Duration time.Duration
	Detector string
	Severity string
	// Labels are those of the process the finding is about.
	Labels map[string]string
	Body   []byte
}

// Point is the number of samples (nanoseconds for off-CPU and wall) in
// one step.
type Point struct {
	Time    time.Time `json:"time"`
	Samples int64     `json:"samples"`
}
