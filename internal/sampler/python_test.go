package sampler

import (
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/symbol"
)

// TestPythonCopies samples the Python fixture in its first second under
// each interpreter: the program copies the code objects its samples ran,
// and each copy alone (the process's memory closed) names the code object
// as a read of the process's memory does, at every instruction index
// looked at.
func TestPythonCopies(t *testing.T) {
	requireBPF(t)
	for _, py := range []string{
		"/root/.pyenv/versions/3.9.18/bin/python3.9",
		"/root/.pyenv/versions/3.10.13/bin/python3.10",
		"/root/.pyenv/versions/3.11.7/bin/python3.11",
		"/root/.pyenv/versions/3.12.1/bin/python3.12",
		"/root/.pyenv/versions/3.13.0/bin/python3.13",
		"/usr/bin/python3.11",
	} {
		t.Run(py, func(t *testing.T) {
			var (
				mu                 sync.Mutex
				in                 *python.Interpreter
				copies, mismatches int
			)
			compare := func(pid uint32, c *python.Copy) {
				mu.Lock()
				defer mu.Unlock()
				if in == nil {
					return
				}
				copied, err1 := python.Open(int(pid), in)
				read, err2 := python.Open(int(pid), in)
				if err1 != nil || err2 != nil {
					return // gone
				}
				defer read.Close()
				copied.Close()
				copied.RememberCopy(c)
				copies++
				for _, index := range []uint64{0, 1, 7, 30, 100} {
					word := 1<<63 | index<<44 | c.Code>>3
					if got, want := copied.Frame(word), read.Frame(word); got != want {
						mismatches++
						t.Errorf("code object %#x at %d: copy names %+v, memory %+v", c.Code, index, got, want)
					}
				}
			}
			s, err := Start(Options{Frequency: 997, OnPythonCopy: func(pid, _ uint32, c *python.Copy) { compare(pid, c) }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			started := time.Now() // the fixture's first second ends after started+1s
			pid := fixture.Python(t, py, fixture.PythonOptions{})
			sym := symbol.New()
			defer sym.Close()
			p, err := proc.Read(pid)
			if err != nil {
				t.Fatal(err)
			}
			sym.Learn(p)
			found, err := python.NewFinder(sym).Find(p)
			if err != nil || found == nil {
				t.Fatalf("Find: %v, %v", found, err)
			}
			mu.Lock()
			in = found
			mu.Unlock()
			if err := s.SetPython(uint32(pid), 0, found); err != nil {
				t.Fatal(err)
			}
			listed := time.Since(started)
			time.Sleep(time.Second - listed) // samples of its first second only: the young ones
			s.Stop()
			mu.Lock()
			defer mu.Unlock()
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("listed %v after its start; %d code objects copied, %d compared", listed.Round(time.Millisecond), st.PythonCodes, copies)
			if copies < 3 || mismatches > 0 {
				t.Errorf("%d copies compared, %d named otherwise than from memory; want 3 or more, none", copies, mismatches)
			}
		})
	}
}
