// Package export sends each window the agent stores to other systems as
// well: an OpenTelemetry collector (OTLP profiles, internal/otlp) or
// Pyroscope. Each target has a bounded queue and one goroutine that sends
// in order, retrying with backoff; a target that is down or slow never
// holds up sampling or the local store, only its own queue, which drops
// the oldest windows beyond its bound and counts them.
package export

import (
	"context"
	"errors"

	"github.com/flint-dev/flint/internal/profile"
)

// Sender delivers windows to one target.
type Sender interface {
	// Send delivers one window. An error wrapped by Rejected means the
	// target refused it for good (retrying cannot help); any other error
	// is retried with backoff.
	Send(ctx context.Context, p *profile.Profile) error
	// Name is the target for logs and metrics: its URL without
	// credentials.
	Name() string
}

// errRejected marks errors that retrying cannot fix.
var errRejected = errors.New("rejected")

type rejected struct{ err error }

func (r rejected) Error() string   { return r.err.Error() }
func (r rejected) Unwrap() []error { return []error{r.err, errRejected} }

// Rejected wraps err to say the target refused the window for good (a 4xx
// answer other than 429, say): the window is dropped and counted, not
// retried.
func Rejected(err error) error { return rejected{err} }

// IsRejected reports whether err came from Rejected.
func IsRejected(err error) bool { return errors.Is(err, errRejected) }
