package spool

import (
	"context"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
)

// BenchmarkPut is what a window costs the agent's loop with --store:
// encoding it and writing it durably (two fsyncs).
func BenchmarkPut(b *testing.B) {
	o := DefaultOptions(b.TempDir())
	o.MaxBytes = 1 << 40
	s, err := Open(o, neverConnects)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := fixture.AgentWindow(time.Now())
	b.ResetTimer()
	for range b.N {
		p.Start = p.Start.Add(p.Duration)
		if err := s.Put(p, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(s.Stats().Bytes)/float64(b.N), "bytes/window")
}

// BenchmarkSend is the sender's side: reading, decoding and handing over
// a spooled window, deleting its file.
func BenchmarkSend(b *testing.B) {
	o := DefaultOptions(b.TempDir())
	o.MaxBytes = 1 << 40
	s, err := Open(o, neverConnects)
	if err != nil {
		b.Fatal(err)
	}
	p := fixture.AgentWindow(time.Now())
	for range b.N {
		p.Start = p.Start.Add(p.Duration)
		if err := s.Put(p, nil); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	b.ResetTimer()
	s, err = Open(o, connectTo(&fakeSink{}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Drain(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkEncode is Put's CPU work; the rest of Put is waiting for the
// disk.
func BenchmarkEncode(b *testing.B) {
	p := fixture.AgentWindow(time.Now())
	for b.Loop() {
		if _, err := encode(p, nil); err != nil {
			b.Fatal(err)
		}
	}
}
