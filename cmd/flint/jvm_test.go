package main

import (
	"bufio"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/flint-dev/flint/internal/fixture"
)

// TestRecordJVM records the Java fixture, run by root and by another user,
// which flint asks for its JIT map without a restart: its compiled methods
// are named and take the fixture's split.
func TestRecordJVM(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
	}{
		{"root", nil},
		{"nobody", &syscall.Credential{Uid: 65534, Gid: 65534}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := fixture.Java(t, tc.cred)
			t.Cleanup(func() { os.Remove("/tmp/perf-" + strconv.Itoa(pid) + ".map") })
			out := filepath.Join(t.TempDir(), "java.folded")
			log, err := exec.Command(flint, "record", "-p", strconv.Itoa(pid), "-F", "499", "-d", "8s", "-o", out).CombinedOutput()
			if err != nil {
				t.Fatalf("record: %v\n%s", err, log)
			}
			t.Logf("record said: %s", log)
			leaves, total := leafCounts(t, out)
			var named int64
			for leaf, n := range leaves {
				if !strings.HasPrefix(leaf, "[anon]+") {
					named += n
				}
			}
			t.Logf("%d samples, %d named; leaves %v", total, named, leaves)
			if float64(named) < 0.95*float64(total) {
				t.Errorf("%d of %d samples named, want 95%% or more", named, total)
			}
			var split [3]int64
			for leaf, n := range leaves {
				for i, fn := range []string{"Busy.a(long)", "Busy.b(long)", "Busy.c(long)"} {
					if strings.HasSuffix(leaf, fn) {
						split[i] += n
					}
				}
			}
			sum := split[0] + split[1] + split[2]
			for i, want := range []float64{50, 30, 20} {
				share := 100 * float64(split[i]) / float64(sum)
				t.Logf("Busy.%c: %.1f%% of %d", 'a'+i, share, sum)
				if math.Abs(share-want) > 3 {
					t.Errorf("Busy.%c: %.1f%% of %d samples in the three, want %.0f%% within 3 points", 'a'+i, share, sum, want)
				}
			}
		})
	}
}

// leafCounts reads a folded profile: samples by leaf frame, and in all.
func leafCounts(t *testing.T, path string) (map[string]int64, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	leaves := map[string]int64{}
	var total int64
	for sc := bufio.NewScanner(f); sc.Scan(); {
		stack, count, ok := strings.Cut(sc.Text(), " ")
		for ok && strings.Contains(count, " ") { // frames may hold spaces
			var more string
			more, count, _ = strings.Cut(count, " ")
			stack += " " + more
		}
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil {
			t.Fatalf("folded line %q", sc.Text())
		}
		frames := strings.Split(stack, ";")
		leaves[frames[len(frames)-1]] += n
		total += n
	}
	return leaves, total
}
