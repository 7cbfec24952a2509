package collect

import (
	"path/filepath"
	"testing"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// TestPythonNames names the Python frames of two processes of one
// interpreter, the second found and read with what the first left: each
// frame is its code object's function, file and first line as CPython has
// them, and a frame of both processes is one location, in the profile as
// in the store.
func TestPythonNames(t *testing.T) {
	for _, py := range []string{"/root/.pyenv/versions/3.12.1/bin/python3.12", "/usr/bin/python3.11"} {
		t.Run(filepath.Base(py), func(t *testing.T) {
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			c.SetPython(nopPython{})
			var samples []sampler.Sample
			var codes [][]fixture.PythonCode
			for i := range uint32(2) {
				pid, cs := fixture.PythonCodes(t, py)
				c.NewProc(uint32(pid), i+1)
				var stack []uint64
				for _, code := range cs {
					stack = append(stack, frameWord(code.Addr, 0))
				}
				samples = append(samples, sampler.Sample{PID: uint32(pid), TID: uint32(pid), Generation: i + 1, Comm: "python", Thread: "python", User: stack, Count: 1})
				codes = append(codes, cs)
			}
			c.ReadPython(samples)
			p := c.Profile(samples, Options{})
			if len(p.Samples) != 2 {
				t.Fatalf("%d samples, want 2", len(p.Samples))
			}
			for i, s := range p.Samples {
				if len(s.Stack) != len(codes[i]) {
					t.Fatalf("process %d: %d frames, want %d", i, len(s.Stack), len(codes[i]))
				}
				for j, l := range s.Stack {
					code := codes[i][j]
					want := code.Name
					if m := python.Module(code.File); m != "" {
						want = m + "." + code.Name
					}
					if f := l.Frames[0]; f.Function != want || f.File != code.File || f.StartLine != code.FirstLine {
						t.Errorf("process %d: %#x named %+v, want %s at %s from line %d", i, code.Addr, f, want, code.File, code.FirstLine)
					}
					if l != p.Samples[0].Stack[j] {
						t.Errorf("process %d: %s is another location than in process 0", i, want)
					}
				}
			}
		})
	}
}
