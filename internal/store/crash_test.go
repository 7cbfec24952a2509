package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashChildEnv makes the test binary a crash child (see crashChild): its
// value is the data directory; crashBaseEnv is the first window index.
const (
	crashChildEnv = "FLINT_STORE_CRASH_CHILD"
	crashBaseEnv  = "FLINT_STORE_CRASH_BASE"
)

// crashChild writes the workload's windows from the base index on, forever,
// and prints "committed N" after each Write returns nil.
func crashChild() {
	base, err := strconv.Atoi(os.Getenv(crashBaseEnv))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	o := DefaultOptions()
	o.Retention = 0 // the windows are in the past; keep them
	o.CompactInterval = 5 * time.Millisecond
	s, err := Open(os.Getenv(crashChildEnv), o)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	wl := newWorkload(t0)
	for i := base; ; i++ {
		if err := s.Write(context.Background(), wl.window(i)); err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println("committed", i)
	}
}

// TestCrashRecovery kills a writing process with SIGKILL at random moments,
// 20 times, and checks after each kill that the store opens and that every
// window the child reported committed reads back exactly. The window being
// written at the kill is either absent or whole.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 20 processes")
	}
	dir := t.TempDir()
	wl := newWorkload(t0)
	var committed []int
	want := map[string]int64{} // canonical samples of committed[:counted]
	counted := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range crashRounds {
		base := round * 100_000
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashBaseEnv+"="+strconv.Itoa(base))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after the child has committed a random number of windows
		// and then waited a random part of a write: mid-transaction,
		// mid-commit or between writes.
		stopAfter := 1 + rng.IntN(40)
		var got []int
		killed := false
		for line := range lines {
			if !strings.HasPrefix(line, "committed ") {
				t.Fatalf("round %d: child says %q", round, line)
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(line, "committed "))
			got = append(got, i)
			if len(got) == stopAfter && !killed {
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, not by SIGKILL", round, err)
		}
		committed = append(committed, got...)

		o := testOptions()
		o.MaxQueryRange = 0
		o.Logf = func(format string, args ...any) {
			t.Errorf("round %d: after kill: "+format, append([]any{round}, args...)...)
		}
		s, err := Open(dir, o)
		if err != nil {
			t.Fatalf("round %d: open after kill: %v", round, err)
		}
		var check string
		if err := s.rdb.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
			t.Fatalf("round %d: integrity_check: %q %v", round, check, err)
		}
		for _, i := range got {
			p := wl.window(i)
			got := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
			if diff := compare(canonical(got.Samples), canonical(p.Samples)); diff != "" {
				t.Fatalf("round %d: committed window %d: %s", round, i, diff)
			}
		}
		// The window in flight: nothing of it, or all of it.
		next := base + len(got)
		p := wl.window(next)
		inFlight := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
		if len(inFlight.Samples) > 0 {
			if diff := compare(canonical(inFlight.Samples), canonical(p.Samples)); diff != "" {
				t.Fatalf("round %d: window %d in flight is partly stored: %s", round, next, diff)
			}
			committed = append(committed, next)
		}
		// Earlier rounds' windows are all still there: everything stored
		// merges to exactly what was committed.
		for _, i := range committed[counted:] {
			for k, n := range canonical(wl.window(i).Samples) {
				want[k] += n
			}
		}
		counted = len(committed)
		all := query(t, s, Query{From: t0, To: t0.Add(time.Duration(crashRounds*100_000) * wlWindow)})
		if diff := compare(canonical(all.Samples), want); diff != "" {
			t.Fatalf("round %d: all windows: %s", round, diff)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d windows committed over %d kills", len(committed), crashRounds)
}

const crashRounds = 20
