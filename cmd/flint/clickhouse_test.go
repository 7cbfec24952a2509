package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store/chtest"
)

// chQuery runs sql on srv as user default and returns its TabSeparated
// rows.
func chQuery(t *testing.T, srv *chtest.Server, sql string) [][]string {
	t.Helper()
	resp, err := http.Post(srv.URL(), "text/plain", strings.NewReader(sql+" FORMAT TabSeparated"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("clickhouse: %s: %d %s", sql, resp.StatusCode, body)
	}
	var rows [][]string
	for line := range strings.Lines(strings.TrimSpace(string(body))) {
		rows = append(rows, strings.Split(strings.TrimSuffix(line, "\n"), "\t"))
	}
	return rows
}

// waitFor polls cond every 200 ms for up to d, and fails with what and
// the agent's log if it stays false.
func waitFor(t *testing.T, a *agentProc, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; agent log:\n%s", d, what, a.stderr)
		}
	}
}

// waitSent waits until the agent has sent n windows. The first send opens
// the store, which creates the schema: on a loaded machine that can take
// ClickHouse 18.16 many seconds.
func waitSent(t *testing.T, a *agentProc, n float64) {
	t.Helper()
	waitFor(t, a, time.Minute, "windows sent", func() bool { return a.metric(t, "flint_windows_sent_total") >= n })
}

// stopAgent stops an agent with SIGTERM, so it puts its last window and
// sends what its spool holds, and returns its log.
func stopAgent(t *testing.T, a *agentProc) string {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("agent exited with %v:\n%s", err, a.stderr)
	}
	return a.stderr.String()
}

// windowRuns reads node's windows from ClickHouse and splits them into runs
// of contiguous windows (each starting where the one before ended); it
// returns the time each run covers.
func windowRuns(t *testing.T, srv *chtest.Server, db, node string) []time.Duration {
	t.Helper()
	rows := chQuery(t, srv, fmt.Sprintf("SELECT start, duration FROM %s.windows FINAL WHERE node = '%s' ORDER BY start", db, node))
	var runs []time.Duration
	var end int64
	for _, r := range rows {
		start, _ := strconv.ParseInt(r[0], 10, 64)
		duration, _ := strconv.ParseInt(r[1], 10, 64)
		// Starts are wall clock, durations monotonic: allow a slewed
		// millisecond.
		if len(runs) == 0 || start-end > int64(time.Millisecond) || end-start > int64(time.Millisecond) {
			runs = append(runs, 0)
		}
		runs[len(runs)-1] += time.Duration(start + duration - max(end, start))
		end = start + duration
	}
	return runs
}

// seriesByNode reads /api/v1/series?by=node: each node's samples.
func seriesByNode(t *testing.T, body string) map[string]int64 {
	t.Helper()
	var resp struct {
		Series []struct {
			Value   string `json:"value"`
			Samples int64  `json:"samples"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("series: %v\n%.400s", err, body)
	}
	totals := map[string]int64{}
	for _, s := range resp.Series {
		totals[s.Value] = s.Samples
	}
	return totals
}

// checkNoDuplicates fails if ClickHouse holds a window, or a sample of
// one, twice. Windows is a ReplacingMergeTree, which may have merged
// duplicates away; samples is a MergeTree and keeps every row inserted.
func checkNoDuplicates(t *testing.T, srv *chtest.Server, db string) {
	t.Helper()
	for _, sql := range []string{
		"SELECT count(), uniqExact(labels, start, stack) FROM " + db + ".samples",
		"SELECT count(), uniqExact(node, start) FROM " + db + ".windows",
	} {
		row := chQuery(t, srv, sql)[0]
		t.Logf("%s: %v", sql, row)
		if row[0] != row[1] || row[0] == "0" {
			t.Errorf("%s: %s rows, %s distinct: want as many, and some", sql, row[0], row[1])
		}
	}
}

func spoolFiles(t *testing.T, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "spool", "*.window"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// TestAgentClickHouseOutage runs an agent writing to a real ClickHouse
// beside the spin fixture. ClickHouse stops for 30 s and comes back:
// every window arrives, none twice, and the outage is two log lines.
// Then ClickHouse stops again, the agent is killed with windows in its
// spool, and a new agent on the same data directory sends them.
func TestAgentClickHouseOutage(t *testing.T) {
	requireRoot(t)
	srv := chtest.Start(t)
	flint, spin := build(t)
	dir := t.TempDir()
	startSpin(t, spin)
	from := time.Now()
	args := []string{"--store", srv.DSN("e2e"), "--node", "a", "--window", "2s", "--frequency", "199"}
	a := startAgent(t, flint, dir, args...)
	waitSent(t, a, 2)

	srv.Stop()
	time.Sleep(30 * time.Second)
	if n := a.metric(t, "flint_spool_windows"); n < 10 {
		t.Errorf("%v windows in the spool after 30 s of 2 s windows without ClickHouse, want 15", n)
	}
	if n := a.metric(t, "flint_spool_oldest_window_age_seconds"); n < 20 {
		t.Errorf("oldest spooled window %v s old after a 30 s outage", n)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The sender retries every 30 s at most.
	waitFor(t, a, time.Minute, "the spool to empty", func() bool { return a.metric(t, "flint_spool_windows") == 0 })
	if n := a.metric(t, "flint_spool_dropped_windows_total"); n != 0 {
		t.Errorf("%v windows dropped from a spool far from full", n)
	}

	// kill -9 with windows in the spool.
	srv.Stop()
	waitFor(t, a, 30*time.Second, "windows to wait in the spool", func() bool { return a.metric(t, "flint_spool_windows") >= 2 })
	a.cmd.Process.Kill()
	a.cmd.Wait()
	log1 := a.stderr.String()
	t.Logf("the first agent's log:\n%s", log1)
	left := spoolFiles(t, dir)
	if left < 2 {
		t.Fatalf("%d windows left in the spool by kill -9, want 2 or more", left)
	}
	for _, want := range []struct {
		text string
		n    int
	}{{"retrying", 2}, {"reachable again", 1}} {
		if got := strings.Count(log1, want.text); got != want.n {
			t.Errorf("log has %d lines with %q, want %d (one per outage):\n%s", got, want.text, want.n, log1)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	b := startAgent(t, flint, dir, args...)
	waitFor(t, b, time.Minute, "the new agent to send the old spool", func() bool {
		return b.metric(t, "flint_windows_sent_total") >= float64(left)
	})
	q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}, "format": {"pprof"}, "selector": {`{node="a",comm="spin"}`}}
	checkPprofSplit(t, b.get(t, "/api/v1/profile", q), []string{"func_a", "func_b", "func_c"}, []float64{50, 30, 20})
	log2 := stopAgent(t, b)
	if n := spoolFiles(t, dir); n != 0 {
		t.Errorf("%d windows still in the spool after a clean stop with ClickHouse up:\n%s", n, log2)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "spool")); len(entries) > 1 {
		t.Errorf("spool holds more than its lock file: %v", entries)
	}

	checkNoDuplicates(t, srv, "e2e")
	// kill -9 lost the window in progress, and nothing else: two runs of
	// contiguous windows, the outage inside the first.
	runs := windowRuns(t, srv, "e2e", "a")
	t.Logf("runs of contiguous windows cover %v", runs)
	if len(runs) != 2 || runs[0] < 34*time.Second {
		t.Errorf("windows in ClickHouse form runs covering %v; want 2 runs, the first over the 30 s outage and the windows before it", runs)
	}
}

// TestFleetOverClickHouse runs three agents, nodes a, b and c, each beside
// a copy of the spin fixture of its own (spin_a, spin_b, spin_c), writing
// to one ClickHouse, which stops for 30 s midway; then two flint server
// replicas over it. Each agent samples every process of this machine, so
// every node holds every fixture. Both replicas answer the same, with
// the fixture's split for each node's own fixture and for all together,
// and every window of every node arrives, none twice.
func TestFleetOverClickHouse(t *testing.T) {
	requireRoot(t)
	srv := chtest.Start(t)
	flint, spin := build(t)
	nodes := []string{"a", "b", "c"}
	from := time.Now()
	for _, n := range nodes {
		fixture := filepath.Join(t.TempDir(), "spin_"+n)
		copyFile(t, spin, fixture)
		startSpin(t, fixture)
	}
	var agents []*agentProc
	for _, n := range nodes {
		a := startAgent(t, flint, t.TempDir(), "--store", srv.DSN("fleet"), "--node", n, "--window", "2s", "--frequency", "199")
		agents = append(agents, a)
	}
	for _, a := range agents {
		waitSent(t, a, 2)
	}
	srv.Stop()
	time.Sleep(30 * time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		waitFor(t, a, time.Minute, "the spool to empty", func() bool { return a.metric(t, "flint_spool_windows") == 0 })
	}
	written := map[string]int64{}
	for i, a := range agents {
		// What each agent sampled and lost, for a failure's reader.
		t.Logf("agent %s:\n%s", nodes[i], bytes.Join(regexp.MustCompile(`(?m)^flint_samples_.*$`).FindAll(a.get(t, "/metrics", nil), -1), []byte("\n")))
		log := stopAgent(t, a)
		if m := regexp.MustCompile(`(\d+) samples in all`).FindStringSubmatch(log); m != nil {
			written[nodes[i]], _ = strconv.ParseInt(m[1], 10, 64)
		} else {
			t.Errorf("agent %s did not say what it wrote:\n%s", nodes[i], log)
		}
		if strings.Count(log, "reachable again") != 1 {
			t.Errorf("agent %s logged no single recovery:\n%s", nodes[i], log)
		}
		// With the windows contiguous (below), none is missing.
		if n := spoolFiles(t, a.dir); n != 0 {
			t.Errorf("agent %s left %d windows in its spool:\n%s", nodes[i], n, log)
		}
	}
	to := time.Now()

	replicas := []*server.Client{{URL: "http://" + freeAddr(t)}, {URL: "http://" + freeAddr(t)}}
	for _, r := range replicas {
		startServer(t, "--store", srv.DSN("fleet", "user="+chtest.Reader, "password="+chtest.Password), "--listen", strings.TrimPrefix(r.URL, "http://"))
	}
	waitHealthy(t, replicas)
	ask := func(path string, kv ...string) string {
		q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {strconv.FormatInt(to.Unix()+1, 10)}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		answer := fetch(t, replicas[0], path, q)
		if other := fetch(t, replicas[1], path, q); other != answer {
			t.Errorf("%s?%s: the replicas differ:\n%.400s\n%.400s", path, q.Encode(), answer, other)
		}
		return answer
	}
	split := []string{"func_a", "func_b", "func_c"}
	for _, n := range nodes {
		t.Run("node "+n, func(t *testing.T) {
			checkPprofSplit(t, []byte(ask("/api/v1/profile", "format", "pprof", "selector", fmt.Sprintf(`{node=%q,comm="spin_%s"}`, n, n))), split, []float64{50, 30, 20})
		})
	}
	t.Run("all nodes", func(t *testing.T) {
		checkPprofSplit(t, []byte(ask("/api/v1/profile", "format", "pprof", "selector", `{comm=~"spin_[abc]"}`)), split, []float64{50, 30, 20})
	})
	// Every node saw the three fixtures take about the same share of its
	// samples: the agents sampled the same processes over the same
	// seconds. (Not the same count: under load a cpu-clock timer that fires
	// late skips its missed periods, and how many differs from one agent's
	// timers to another's.)
	fixture := seriesByNode(t, ask("/api/v1/series", "by", "node", "step", "10s", "selector", `{comm=~"spin_[abc]"}`))
	all := seriesByNode(t, ask("/api/v1/series", "by", "node", "step", "10s"))
	t.Logf("fixture samples by node: %v of %v", fixture, all)
	if !maps.Equal(all, written) {
		t.Errorf("the replicas hold %v samples by node, the agents wrote %v", all, written)
	}
	share := func(n string) float64 { return float64(fixture[n]) / float64(all[n]) }
	if len(fixture) != 3 || len(all) != 3 {
		t.Fatalf("series by node %v and %v, want a, b and c", fixture, all)
	}
	for _, n := range nodes[1:] {
		if d := share(n) - share("a"); d < -0.05 || d > 0.05 {
			t.Errorf("the fixtures are %.1f%% of node %s's samples and %.1f%% of node a's: want within 5 points", 100*share(n), n, 100*share("a"))
		}
	}

	checkNoDuplicates(t, srv, "fleet")
	for _, n := range nodes {
		if runs := windowRuns(t, srv, "fleet", n); len(runs) != 1 || runs[0] < 34*time.Second {
			t.Errorf("node %s: windows form runs covering %v, want one over the 30 s outage and the windows before it", n, runs)
		}
	}
}
