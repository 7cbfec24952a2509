package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// TestChdb replays every statement the ClickHouse store sends, on a real
// workload, in chdb (a current ClickHouse release in-process, Python's
// chdb package), and compares the answers of every query with ClickHouse
// 18.16's: flint's SQL must mean the same to old and new releases. It
// skips when python3 cannot import chdb (make deps-chdb installs it).
func TestChdb(t *testing.T) {
	if err := exec.Command("python3", "-c", "import chdb").Run(); err != nil {
		t.Skip("python3 cannot import chdb (make deps-chdb): the SQL is checked against ClickHouse 18.16 only")
	}
	o := testOptions()
	o.Retention = 48 * time.Hour
	s := openClickHouse(t, newDatabase(t), o)
	rec := &recorder{dir: t.TempDir(), next: http.DefaultTransport}
	s.hosts[0].http.Transport = rec
	ctx := context.Background()

	// A workload that makes the store send each kind of statement.
	wl := newWorkload(t0)
	ps := mixedWindows(wl, 12)
	old := wl.window(0)
	old.Start = t0.Add(-5 * 24 * time.Hour)
	// Off-CPU time beside a CPU window, one count beyond a UInt32.
	off := wl.window(1)
	off.Kind, off.Period = profile.OffCPU, time.Nanosecond
	off.Samples[0].Count = 5e9
	// A window sampled at another rate: the queries read the hour one
	// period at a time.
	slow := wl.window(12)
	slow.Period *= 5
	ps = append(ps, old, off, slow)
	for i, p := range ps {
		if err := s.WriteWindow(ctx, p, []Finding{finding(p.Start, "busy-poll", "svc1")}, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	s.now = func() time.Time { return t0 }
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	hour := Query{From: t0, To: t0.Add(time.Hour)}
	for _, sel := range []string{"", `{comm="svc1"}`, `{pod=~"svc2-.*",thread!="worker-0"}`, `{container!~".+"}`} {
		q := hour
		q.Selector = mustParse(t, sel)
		for _, keep := range [][]string{nil, {}, {"comm", "no_such_label"}} {
			q.KeepLabels = keep
			query(t, s, q)
		}
		if _, err := s.Series(ctx, SeriesQuery{Query: q, By: "comm", Step: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Findings(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []profile.Kind{profile.OffCPU, profile.Wall} {
		q := hour
		q.Type = typ
		query(t, s, q)
		if _, err := s.Series(ctx, SeriesQuery{Query: q, By: "comm", Step: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LabelNames(ctx, hour.From, hour.To); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LabelValues(ctx, "comm", hour.From, hour.To); err != nil {
		t.Fatal(err)
	}

	// What chdb runs: the schema, then the statements as sent (an INSERT's
	// rows from a file), then each query again, answering in TSV.
	db := s.hosts[0].database
	var steps []chdbStep
	for _, q := range chDDL(db, "") {
		steps = append(steps, chdbStep{SQL: q})
	}
	kinds := map[string]bool{}
	for _, st := range rec.steps {
		kinds[strings.Fields(st.SQL)[0]] = true
		steps = append(steps, st)
	}
	for _, want := range []string{"INSERT", "SELECT", "ALTER"} {
		if !kinds[want] {
			t.Fatalf("the workload sent no %s", want)
		}
	}
	var queries []string
	for _, st := range rec.steps {
		if strings.HasPrefix(st.SQL, "SELECT") && !strings.Contains(st.SQL, "system.") {
			queries = append(queries, strings.TrimSuffix(st.SQL, " FORMAT RowBinary"))
		}
	}
	queries = slices.Compact(queries)
	for _, q := range queries {
		steps = append(steps, chdbStep{SQL: q, Answer: true})
	}
	answers := runChdb(t, db, steps)

	// 18.16's answers to the same queries, on the same data.
	for i, q := range queries {
		got := answers[i]
		body, err := s.hosts[0].do(ctx, q+" FORMAT TabSeparated", nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		b, _ := io.ReadAll(body)
		body.Close()
		if want := sortedLines(string(b)); got != want {
			t.Errorf("%s\nchdb answers %.500q\n18.16 answers %.500q", q, got, want)
		}
	}
}

// chdbStep is one statement for chdb; Rows, if set, is a file of RowBinary
// rows for an INSERT.
type chdbStep struct {
	SQL       string `json:"sql"`
	Rows      string `json:"rows,omitempty"`
	Structure string `json:"structure,omitempty"`
	Answer    bool   `json:"answer,omitempty"`
}

// recorder is an http.RoundTripper that keeps the statements it carries.
type recorder struct {
	dir  string
	next http.RoundTripper
	mu   sync.Mutex
	n    int
	// steps are the statements in the order they were sent.
	steps []chdbStep
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	st := chdbStep{SQL: req.URL.Query().Get("query")}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.SQL == "" {
		st.SQL = string(body)
	} else {
		// INSERT INTO table FORMAT RowBinary, rows in the body.
		table := strings.Fields(st.SQL)[2]
		r.n++
		st.Rows = filepath.Join(r.dir, fmt.Sprintf("rows%d", r.n))
		if err := os.WriteFile(st.Rows, body, 0o644); err != nil {
			return nil, err
		}
		for _, t := range chTables {
			if t.name == table {
				cols := make([]string, len(t.columns))
				for i, c := range t.columns {
					cols[i] = c[0] + " " + c[1]
				}
				st.Structure = strings.Join(cols, ", ")
			}
		}
		st.SQL = "INSERT INTO " + table + " SELECT * FROM file(" + quote(st.Rows) + ", 'RowBinary', " + quote(st.Structure) + ")"
	}
	r.steps = append(r.steps, st)
	return r.next.RoundTrip(req)
}

// chdbScript runs the steps in a chdb session and prints, as JSON, the
// TSV answer of each step that wants one, in base64: the bytes as they are.
const chdbScript = `
import base64, json, sys
from chdb import session
db, steps_file, path = sys.argv[1], sys.argv[2], sys.argv[3]
s = session.Session(path)
s.query("CREATE DATABASE IF NOT EXISTS " + db)
s.query("USE " + db)
answers = []
for st in json.load(open(steps_file)):
    try:
        r = s.query(st["sql"], "TabSeparated")
    except Exception as e:
        print(json.dumps({"error": st["sql"][:2000] + ": " + str(e)[:2000]}))
        sys.exit(0)
    if st.get("answer"):
        answers.append(base64.b64encode(r.bytes()).decode())
print(json.dumps({"answers": answers}))
`

func runChdb(t *testing.T, db string, steps []chdbStep) []string {
	t.Helper()
	dir := t.TempDir()
	stepsFile := filepath.Join(dir, "steps.json")
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stepsFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", chdbScript, db, stepsFile, filepath.Join(dir, "chdb"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chdb: %v: %s", err, out)
	}
	var res struct {
		Error   string   `json:"error"`
		Answers []string `json:"answers"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]), &res); err != nil {
		t.Fatalf("chdb output %q: %v", out, err)
	}
	if res.Error != "" {
		t.Fatalf("chdb refused a statement: %s", res.Error)
	}
	for i, a := range res.Answers {
		b, err := base64.StdEncoding.DecodeString(a)
		if err != nil {
			t.Fatal(err)
		}
		res.Answers[i] = sortedLines(string(b))
	}
	return res.Answers
}

// sortedLines sorts a TSV answer's rows: GROUP BY answers have no order.
func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
