package spool

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// agentWindow is a window of the agent's shape, as internal/store's
// benchmarks make it: 300 distinct stacks of depth 20-40 over 50 label
// sets.
func agentWindow(start time.Time) *profile.Profile {
	exe := &profile.Mapping{Start: 0x400000, Limit: 0x4000000, File: "/usr/bin/app", BuildID: "0123456789abcdef"}
	locs := make([]*profile.Location, 2000)
	for i := range locs {
		locs[i] = &profile.Location{Address: 0x400000 + uint64(i)*64, Mapping: exe,
			Frames: []symbol.Frame{{Function: fmt.Sprintf("pkg%d.(*Type).Method%d", i%40, i), File: fmt.Sprintf("/src/pkg%d/file.go", i%40), Line: i}}}
	}
	p := &profile.Profile{Start: start, Duration: 10 * time.Second, Period: time.Second / 99}
	for i := range 300 {
		stack := make([]*profile.Location, 20+i%21)
		for j := range stack {
			stack[j] = locs[(i*7+j*13)%len(locs)]
		}
		labels := map[string]string{
			profile.LabelComm: "app" + strconv.Itoa(i%50), profile.LabelPID: strconv.Itoa(1000 + i%50),
			profile.LabelThread: "worker", profile.LabelNode: "node-1", profile.LabelExe: "/usr/bin/app",
			profile.LabelCgroup: "/kubepods/pod" + strconv.Itoa(i%50),
		}
		p.Samples = append(p.Samples, &profile.Sample{Stack: stack, Count: int64(1 + i%5), Labels: labels})
	}
	return p
}

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
	p := agentWindow(time.Now())
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
	p := agentWindow(time.Now())
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
	p := agentWindow(time.Now())
	for b.Loop() {
		if _, err := encode(p, nil); err != nil {
			b.Fatal(err)
		}
	}
}
