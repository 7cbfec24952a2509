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
// looked at. Under 3.11 and 3.12, frozen.py runs code objects static in
// the interpreter's image, which are copied too.
func TestPythonCopies(t *testing.T) {
	requireBPF(t)
	for _, tc := range []struct{ python, script string }{
		{"/root/.pyenv/versions/3.9.18/bin/python3.9", ""},
		{"/root/.pyenv/versions/3.10.13/bin/python3.10", ""},
		{"/root/.pyenv/versions/3.11.7/bin/python3.11", ""},
		{"/root/.pyenv/versions/3.11.7/bin/python3.11", "frozen.py"},
		{"/root/.pyenv/versions/3.12.1/bin/python3.12", ""},
		{"/root/.pyenv/versions/3.12.1/bin/python3.12", "frozen.py"},
		{"/root/.pyenv/versions/3.13.0/bin/python3.13", ""},
		{"/usr/bin/python3.11", ""},
		{"/usr/bin/python3.11", "frozen.py"},
	} {
		name := tc.python
		if tc.script != "" {
			name += " " + tc.script
		}
		t.Run(name, func(t *testing.T) {
			var (
				mu                          sync.Mutex
				in, inRead                  *python.Interpreter
				copies, statics, mismatches int
			)
			compare := func(pid uint32, c *python.Copy) {
				mu.Lock()
				defer mu.Unlock()
				if in == nil {
					return
				}
				start, err := proc.StartTime(int(pid))
				if err != nil {
					return // gone
				}
				copied, read := python.Open(int(pid), start, in), python.Open(int(pid), start, inRead)
				defer read.Close()
				copied.Close()
				copied.RememberCopy(c)
				copies++
				if start, end := in.Image(); c.Code >= start && c.Code < end {
					statics++
				}
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
			pid := fixture.Python(t, tc.python, fixture.PythonOptions{Script: tc.script})
			// Two finders: static code objects (3.11, 3.12), kept by an
			// interpreter's file once read, are read apart from their copies.
			found := findInterpreter(t, pid, 2)
			mu.Lock()
			in, inRead = found[0], found[1]
			mu.Unlock()
			if err := s.SetPython(uint32(pid), 0, found[0]); err != nil {
				t.Fatal(err)
			}
			listed := time.Since(started)
			time.Sleep(time.Second - listed) // samples of its first second only: the young ones
			s.Stop()
			// Copies that named their samples whole woke no reader: Drain
			// reads them, as the agent's periodic drain does.
			if _, err := s.Drain(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("listed %v after its start; %d code objects copied, %d compared, %d static", listed.Round(time.Millisecond), st.PythonCodes, copies, statics)
			if copies < 3 || mismatches > 0 {
				t.Errorf("%d copies compared, %d named otherwise than from memory; want 3 or more, none", copies, mismatches)
			}
			if tc.script == "frozen.py" && statics == 0 {
				t.Errorf("no static code object copied of %d", copies)
			}
		})
	}
}

// TestPythonToRead samples the Python fixture: PythonToRead stays false,
// and DrainSoon silent, while the fixture is in its first second, whose
// samples bring copies of their code objects; once samples of an older
// process were taken DrainSoon asks for a drain and PythonToRead is true,
// and false again when none were since the last Drain.
func TestPythonToRead(t *testing.T) {
	requireBPF(t)
	s, err := Start(Options{Frequency: 997})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	started := time.Now() // the fixture is younger than time.Since(started)
	pid := fixture.Python(t, "/usr/bin/python3", fixture.PythonOptions{})
	if err := s.SetPython(uint32(pid), 0, findInterpreter(t, pid, 1)[0]); err != nil {
		t.Fatal(err)
	}
	if young := 900*time.Millisecond - time.Since(started); young > 100*time.Millisecond {
		time.Sleep(young)
		if s.PythonToRead() {
			t.Error("PythonToRead: true in the fixture's first second, want false")
		}
		if drainAsked(s, 0) {
			t.Error("DrainSoon in the fixture's first second")
		}
	} else {
		t.Logf("the fixture started in %v: too late to look at its first second", time.Since(started))
	}
	if !drainAsked(s, time.Until(started.Add(6*time.Second))) {
		t.Fatal("no DrainSoon for 5 s of samples after the fixture's first second")
	}
	if !s.PythonToRead() {
		t.Error("PythonToRead: false when DrainSoon asked, want true")
	}
	// A sample within 0.9 s of a drain asks for none: the caller looks
	// a second after it.
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	drained := time.Now()
	for !s.PythonToRead() && time.Since(drained) < 500*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	if s.PythonToRead() && time.Since(drained) < 500*time.Millisecond {
		if drainAsked(s, 0) {
			t.Error("DrainSoon for Python sampled right after a drain")
		}
	} else {
		t.Logf("no Python sampled in the 500 ms after a drain: too late to look (%v)", time.Since(drained))
	}
	s.Stop()
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	if s.PythonToRead() {
		t.Error("PythonToRead: true with no sample since the last Drain, want false")
	}
}

// findInterpreter returns the interpreter of process pid as each of n
// finders finds it, each finder its own cache of the interpreter's file.
func findInterpreter(t *testing.T, pid, n int) []*python.Interpreter {
	t.Helper()
	sym := symbol.New()
	t.Cleanup(func() { sym.Close() })
	p, err := proc.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	sym.Learn(p)
	var found []*python.Interpreter
	for range n {
		in, err := python.NewFinder(sym).Find(p)
		if err != nil || in == nil {
			t.Fatalf("Find: %v, %v", in, err)
		}
		found = append(found, in)
	}
	return found
}
