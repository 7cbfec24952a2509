package symbol

import (
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/flint-dev/flint/internal/proc"
)

// ownPC returns an address inside this function and its name as Go's
// runtime gives it.
func ownPC() (uint64, string) {
	pc, _, _, _ := runtime.Caller(0)
	return uint64(pc), runtime.FuncForPC(pc).Name()
}

func TestSymbolizerNamesOwnProcess(t *testing.T) {
	p, err := proc.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	defer s.Close()
	s.Learn(p)
	pc, want := ownPC()
	frames, m := s.User(p, pc, false)
	if m == nil || len(frames) == 0 || frames[len(frames)-1].Function != want {
		t.Fatalf("User(%#x) = %+v in %+v, want %s", pc, frames, m, want)
	}
	if !strings.HasSuffix(frames[0].File, "symbolizer_test.go") || frames[0].Line == 0 {
		t.Errorf("frame %+v lacks file:line", frames[0])
	}
	if id := s.BuildID(m.Key()); id == "" {
		t.Error("no build ID for the test binary")
	}

	// Named from the cache every round, the binary stays.
	for range 5 {
		s.Trim(nil)
		s.User(p, pc, false)
	}
	if len(s.files) == 0 || s.Stats().BinariesParsed != 1 {
		t.Fatalf("a binary named every round was released: %d files, %d parsed", len(s.files), s.Stats().BinariesParsed)
	}

	// Unused, it stays while this process maps it, up to 30 rounds.
	k := m.Key()
	mapped := func(f proc.FileKey) bool { return f == k }
	for range 29 {
		s.Trim(mapped)
	}
	if s.files[k] == nil {
		t.Fatal("a binary a live process maps was released before 30 rounds")
	}
	s.Trim(mapped)
	if len(s.files) != 0 {
		t.Fatalf("after 30 rounds unused: %d files kept", len(s.files))
	}

	// Unused for three rounds and mapped by no process, the binary is
	// released; naming it again opens it anew and gives the same frames.
	s.User(p, pc, false)
	for range 3 {
		s.Trim(nil)
	}
	if len(s.files) != 0 || len(s.names) != 0 {
		t.Fatalf("after Trim: %d files, %d names kept", len(s.files), len(s.names))
	}
	again, _ := s.User(p, pc, false)
	if !reflect.DeepEqual(again, frames) {
		t.Errorf("after Trim: %+v, want %+v", again, frames)
	}
	if st := s.Stats(); st.BinariesParsed != 3 {
		t.Errorf("%d binaries parsed, want 3 (at first, after each release)", st.BinariesParsed)
	}
}

func TestSymbolizerUnknownAddress(t *testing.T) {
	s := New()
	defer s.Close()
	p := &proc.Process{PID: os.Getpid()}
	frames, m := s.User(p, 0x1234, false)
	if m != nil || len(frames) != 1 || frames[0].Function != "[unknown]" {
		t.Errorf("User(unmapped) = %+v, %+v", frames, m)
	}
}

// TestSymbolizerRetriesFileOfExitedProcess names an address of this binary
// first through a process that has exited, so the file cannot be opened:
// that name is not kept, and once a window has passed a live process of
// the binary opens it and gets the real name.
func TestSymbolizerRetriesFileOfExitedProcess(t *testing.T) {
	own, err := proc.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	gone := *own
	gone.PID = exited.Process.Pid
	s := New()
	defer s.Close()
	pc, want := ownPC()
	if frames, _ := s.User(&gone, pc, false); frames[len(frames)-1].Function == want {
		t.Fatalf("named %s through an exited process: the test no longer fails an open", want)
	}
	s.Learn(own) // within the window the failure stands: no second open
	s.Trim(nil)
	if frames, _ := s.User(own, pc, false); frames[len(frames)-1].Function != want {
		t.Errorf("a live process of the binary, a window later: %+v, want %s", frames, want)
	}
}
