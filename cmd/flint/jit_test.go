package main

import (
	"bufio"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
)

// TestRecordJIT records programs whose hot code a JIT compiled: the Java
// fixture, run by root, by another user and in PID and mount namespaces of
// its own (a /tmp of its own), which flint asks for its JIT map without a
// restart, and the Node.js fixture, which writes its own
// (--perf-basic-prof). Their compiled functions are named and take the
// fixtures' split.
func TestRecordJIT(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) int
		funcs []string // leaf functions end so
	}{
		{"java as root", func(t *testing.T) int { return fixture.Java(t, fixture.JavaOptions{}) }, []string{"Busy.a(long)", "Busy.b(long)", "Busy.c(long)"}},
		{"java as nobody", func(t *testing.T) int {
			return fixture.Java(t, fixture.JavaOptions{Cred: &syscall.Credential{Uid: 65534, Gid: 65534}})
		},
			[]string{"Busy.a(long)", "Busy.b(long)", "Busy.c(long)"}},
		{"java in a container", func(t *testing.T) int { return fixture.Java(t, fixture.JavaOptions{Container: true}) },
			[]string{"Busy.a(long)", "Busy.b(long)", "Busy.c(long)"}},
		{"node", func(t *testing.T) int {
			fixture.NeedTools(t, "node")
			node, _ := exec.LookPath("node")
			script, err := filepath.Abs("../../testdata/fixtures/node/hot.js")
			if err != nil {
				t.Fatal(err)
			}
			return startFixture(t, node, "--perf-basic-prof", script)
		}, []string{"hotA", "hotB", "hotC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := tc.start(t)
			t.Cleanup(func() { os.Remove("/tmp/perf-" + strconv.Itoa(pid) + ".map") })
			out := filepath.Join(t.TempDir(), "jit.folded")
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
			if float64(named) < 0.95*float64(total) {
				t.Errorf("%d of %d samples named, want 95%% or more; leaves %v", named, total, leaves)
			}
			var split [3]int64
			for leaf, n := range leaves {
				for i, fn := range tc.funcs {
					// V8 names add the source position: "JS:*hotA /path/hot.js:4:10".
					if name, _, _ := strings.Cut(leaf, " /"); strings.HasSuffix(name, fn) {
						split[i] += n
					}
				}
			}
			sum := split[0] + split[1] + split[2]
			for i, want := range []float64{50, 30, 20} {
				share := 100 * float64(split[i]) / float64(sum)
				t.Logf("%s: %.1f%% of %d", tc.funcs[i], share, sum)
				if math.Abs(share-want) > 3 {
					t.Errorf("%s: %.1f%% of %d samples in the three, want %.0f%% within 3 points", tc.funcs[i], share, sum, want)
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

// TestAgentNamesJVM runs the agent beside the Java fixture: it asks the JVM
// for its JIT map, and a query for the samples labelled runtime="jvm" names
// the fixture's compiled methods. At 499 Hz its ~3,500 samples put the 3
// points the split may miss by at 3.5 standard deviations of sampling
// noise; 199 Hz gave 1,390 samples, 2.2 deviations, and a failure now and
// then.
func TestAgentNamesJVM(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	pid := fixture.Java(t, fixture.JavaOptions{})
	t.Cleanup(func() { os.Remove("/tmp/perf-" + strconv.Itoa(pid) + ".map") })
	from := time.Now()
	a := startAgent(t, flint, t.TempDir(), "--window", "2s", "--frequency", "499")
	waitFor(t, a, time.Minute, "a JIT map and two windows", func() bool {
		return a.metric(t, "flint_jvm_maps_written_total") >= 1 && a.metric(t, "flint_windows_written_total") >= 3
	})
	q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}, "format": {"pprof"},
		"selector": {fmt.Sprintf(`{runtime="jvm",pid="%d"}`, pid)}}
	checkPprofSplit(t, a.get(t, "/api/v1/profile", q), []string{"long Busy.a(long)", "long Busy.b(long)", "long Busy.c(long)"}, []float64{50, 30, 20})
	stopAgent(t, a)
}
