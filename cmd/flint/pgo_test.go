package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	pprofile "github.com/google/pprof/profile"
)

// TestRecordPGO records the PGO fixture with flint and builds it again
// with that profile (go build -pgo): the compiler accepts the profile and
// inlines the hot call it would not inline without one. Whether the PGO
// build runs faster is measured by bench/pgo.sh, not here.
func TestRecordPGO(t *testing.T) {
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
	// The hot call site, in hot's loop.
	hotCall := regexp.MustCompile(`(?m)^\S+main\.go:(\d+):\d+: inlining call to scramble$`)
	if m := hotCall.FindString(goBuild("off")); m != "" {
		t.Fatalf("scramble is inlined without a profile (%s): the fixture no longer tests PGO", m)
	}

	cmd := exec.Command(fixture, "spin", "1h")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("fixture said %q", line)
	}
	pgo := filepath.Join(dir, "default.pgo")
	if out, err := exec.Command(flint, "record", "-p", strconv.Itoa(cmd.Process.Pid), "-d", "2s", "-F", "499", "-o", pgo).CombinedOutput(); err != nil {
		t.Fatalf("flint record: %v\n%s", err, out)
	}

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
	want := strconv.Itoa(sourceLine(t, "\t\ts += scramble("))
	if m := hotCall.FindStringSubmatch(built); m == nil || m[1] != want {
		t.Errorf("go build -pgo with flint's profile: want scramble inlined at main.go:%s, the hot call; -m said:\n%s", want, built)
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
