package main

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"
)

// TestPGO builds the PGO fixture again with a profile flint took of it
// (go build -pgo), from flint record and from the agent's store through the
// API: the compiler accepts each and inlines the hot call it does not
// inline without a profile. Whether the PGO build runs faster is measured
// by bench/pgo.sh, not here.
func TestPGO(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	dir := t.TempDir()
	fixture := filepath.Join(dir, "pgo")
	goBuild := func(pgo string) string {
		t.Helper()
		out, err := exec.Command("go", "build", "-pgo="+pgo, "-gcflags=-m", "-o", fixture, "../../testdata/fixtures/pgo").CombinedOutput()
		if err != nil {
			t.Fatalf("go build -pgo=%s: %v\n%s", pgo, err, out)
		}
		return string(out)
	}
	hotCall := regexp.MustCompile(`(?m)^\S+main\.go:(\d+):\d+: inlining call to scramble$`)
	if m := hotCall.FindString(goBuild("off")); m != "" {
		t.Fatalf("scramble is inlined without a profile (%s): the fixture no longer tests PGO", m)
	}
	a := startAgent(t, flint, t.TempDir(), "--window", "1s", "--frequency", "499")
	from := time.Now()
	pid := strconv.Itoa(startFixture(t, fixture, "spin", "1h"))

	recorded := filepath.Join(dir, "default.pgo")
	if out, err := exec.Command(flint, "record", "-p", pid, "-d", "2s", "-F", "499", "-o", recorded).CombinedOutput(); err != nil {
		t.Fatalf("flint record: %v\n%s", err, out)
	}
	waitMetric(t, a, "flint_windows_written_total", a.metric(t, "flint_windows_written_total")+2)
	stored := filepath.Join(dir, "stored.pgo")
	q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}, "format": {"pprof"}, "selector": {`{pid="` + pid + `"}`}}
	if err := os.WriteFile(stored, a.get(t, "/api/v1/profile", q), 0o644); err != nil {
		t.Fatal(err)
	}

	want := strconv.Itoa(sourceLine(t, "\t\ts += scramble("))
	for _, pgo := range []string{recorded, stored} {
		t.Run(filepath.Base(pgo), func(t *testing.T) {
			// The profile names where each function starts, as Go's own do.
			f, err := os.Open(pgo)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := pprofile.Parse(f)
			if err != nil {
				t.Fatal(err)
			}
			starts := map[string]int64{}
			for _, fn := range p.Function {
				starts[fn.Name] = fn.StartLine
			}
			for _, fn := range []string{"scramble", "hot"} {
				if got, want := starts["main."+fn], sourceLine(t, "func "+fn+"("); got != int64(want) {
					t.Errorf("main.%s starts at line %d in the profile, at %d in the source", fn, got, want)
				}
			}
			built := goBuild(pgo)
			if m := hotCall.FindStringSubmatch(built); m == nil || m[1] != want {
				t.Errorf("go build -pgo: want scramble inlined at main.go:%s, the hot call; -m said:\n%s", want, built)
			}
		})
	}
}

// sourceLine returns the line of the PGO fixture's source that starts with
// prefix.
func sourceLine(t *testing.T, prefix string) int {
	t.Helper()
	src, err := os.ReadFile("../../testdata/fixtures/pgo/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starting %q in the PGO fixture", prefix)
	return 0
}
