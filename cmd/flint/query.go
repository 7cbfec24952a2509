package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/server"
)

// defaultServer is where `flint agent` listens unless told otherwise.
const defaultServer = "http://127.0.0.1:7070"

// APIConfig is how the query commands reach an agent and which samples
// they ask for. Times are sent as given, so relative ones ("now-15m") are
// read by the agent's clock.
type APIConfig struct {
	Server   string // base URL
	Token    string
	Since    string // a duration; sets From to now minus it
	From, To string // times as the API reads them; empty: the API's default
	Selector string
	// Type is the profile type asked for: CPU time, time off the CPU, or
	// both (wall); the commands that take --type (typeFlag) set it.
	Type profile.Kind
}

// Validate checks the config and folds Since into From; an empty Token
// comes from FLINT_TOKEN.
func (c *APIConfig) Validate() error {
	if c.Token == "" {
		c.Token = os.Getenv("FLINT_TOKEN")
	}
	if !strings.Contains(c.Server, "://") {
		c.Server = "http://" + c.Server
	}
	u, err := url.Parse(c.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--server %q: want a URL such as %s", c.Server, defaultServer)
	}
	c.Server = strings.TrimSuffix(c.Server, "/")
	if c.Since != "" {
		if c.From != "" {
			return errors.New("--since and --from exclude each other")
		}
		if _, err := server.ParseDuration(c.Since); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
		c.From = "now-" + c.Since
	}
	now := time.Now()
	for _, t := range []struct{ name, value string }{{"--from", c.From}, {"--to", c.To}} {
		if t.value == "" {
			continue
		}
		if _, err := server.ParseTime(t.value, now); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if _, err := selector.Parse(c.Selector); err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	return nil
}

// values are the API parameters for the range and selector.
func (c *APIConfig) values() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"from": c.From, "to": c.To, "selector": c.Selector} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if c.Type != profile.CPU {
		q.Set("type", c.Type.String())
	}
	return q
}

func (c *APIConfig) client() *server.Client {
	return &server.Client{URL: c.Server, Token: c.Token}
}

// apiFlags registers the flags every query command shares; FLINT_SERVER
// and FLINT_TOKEN provide the defaults of --server and --token.
func apiFlags(fs *flag.FlagSet, c *APIConfig) {
	c.Server = defaultServer
	if s := os.Getenv("FLINT_SERVER"); s != "" {
		c.Server = s
	}
	fs.StringVar(&c.Server, "server", c.Server, "`URL` of the agent or flint server, http or https (env FLINT_SERVER)")
	// The default comes from the environment after parsing, so -h does not
	// print the token.
	fs.StringVar(&c.Token, "token", "", "the API's `token` (env FLINT_TOKEN)")
	fs.StringVar(&c.Since, "since", "", "the last `duration`, such as 15m, 2h or 1d (same as --from now-DURATION)")
	fs.StringVar(&c.From, "from", "", "start `time`: RFC 3339, Unix seconds, now-15m (default: an hour before --to)")
	fs.StringVar(&c.To, "to", "", "end `time` (default now)")
	fs.StringVar(&c.Selector, "selector", "", "which samples, as label matchers such as '{comm=\"api\"}' (default all)")
}

// QueryConfig is what `flint query` was asked to do.
type QueryConfig struct {
	APIConfig
	Output string // "-" for stdout
	Format profile.Format
	// Diff asks for the differential profile against the base range,
	// BaseFrom to BaseTo (each defaulting as /api/v1/diff says).
	Diff             bool
	BaseFrom, BaseTo string
	BaseSelector     string
	Normalize        bool
}

// Validate checks the config and fills the format from the output name.
func (c *QueryConfig) Validate() error {
	if err := c.APIConfig.Validate(); err != nil {
		return err
	}
	now := time.Now()
	for _, t := range []struct{ name, value string }{{"--base-from", c.BaseFrom}, {"--base-to", c.BaseTo}} {
		if t.value == "" {
			continue
		}
		if _, err := server.ParseTime(t.value, now); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		c.Diff = true
	}
	if c.BaseSelector != "" {
		if _, err := selector.Parse(c.BaseSelector); err != nil {
			return fmt.Errorf("--base-selector: %w", err)
		}
		c.Diff = true
	}
	c.Diff = c.Diff || c.Normalize
	if c.Format == "" {
		if c.Output == "-" {
			c.Format = profile.FormatFolded
		} else {
			f, err := profile.FormatOf(c.Output)
			if err != nil {
				return err
			}
			c.Format = f
		}
	}
	return nil
}

func parseQuery(args []string) (*QueryConfig, error) {
	c := &QueryConfig{Output: "flint.svg"}
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	apiFlags(fs, &c.APIConfig)
	for _, name := range []string{"o", "output"} {
		fs.StringVar(&c.Output, name, c.Output, "output `file`; its extension picks the format (.svg .html .pb.gz .pprof .pgo .folded .json); - for stdout")
	}
	fs.Var(formatFlag{&c.Format}, "format", "output `format`: svg, html, pprof, folded, json (default: from -o)")
	fs.BoolVar(&c.Diff, "diff", false, "compare with the base range (default: the same length just before --from)")
	fs.StringVar(&c.BaseFrom, "base-from", "", "start `time` of the base range (implies --diff)")
	fs.StringVar(&c.BaseTo, "base-to", "", "end `time` of the base range (implies --diff)")
	fs.StringVar(&c.BaseSelector, "base-selector", "", "the base's `selector` (default --selector; implies --diff)")
	fs.BoolVar(&c.Normalize, "normalize", false, "scale the base to the same total first (implies --diff)")
	typeFlag(fs, &c.APIConfig)
	if err := parseFlags(fs, args, "Usage: flint query [--since 15m | --from T --to T] [--selector SEL] [--type cpu|off-cpu|wall] [-o out.svg] [--diff]\n\nFetches the merged profile of a time range from a flint agent and writes a flame graph,\npprof, folded stacks or a JSON tree; with --diff, what changed against a base range."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func query(args []string, stdout, stderr io.Writer) error {
	c, err := parseQuery(args)
	if err != nil {
		return err
	}
	var out io.Writer = stdout
	if c.Output != "-" {
		o, err := createOutput(c.Output)
		if err != nil {
			return err
		}
		defer o.abort()
		out = o
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	path, q := "/api/v1/profile", c.values()
	q.Set("format", string(c.Format))
	if c.Diff {
		path = "/api/v1/diff"
		for name, v := range map[string]string{"base_from": c.BaseFrom, "base_to": c.BaseTo, "base_selector": c.BaseSelector} {
			if v != "" {
				q.Set(name, v)
			}
		}
		if c.Normalize {
			q.Set("normalize", "true")
		}
	}
	body, err := c.client().Get(ctx, path, q)
	if err != nil {
		return apiError("query", c.Server, err)
	}
	defer body.Close()
	n, err := io.Copy(out, body)
	if err != nil {
		return fmt.Errorf("query: read response: %w", err)
	}
	if o, ok := out.(*output); ok {
		if err := o.commit(); err != nil {
			return err
		}
		what := "profile"
		if c.Diff {
			what = "diff"
		}
		fmt.Fprintf(stderr, "flint: %s written to %s (%s, %d bytes)\n", what, c.Output, c.Format, n)
	}
	return nil
}

// typeFlag registers --type, the profile type a command asks for.
func typeFlag(fs *flag.FlagSet, c *APIConfig) {
	fs.Var(kindFlag{&c.Type}, "type", "profile `type`: cpu, off-cpu (where threads waited, stored by flint agent --off-cpu) or wall (both)")
}

// kindFlag is a profile type flag: cpu, off-cpu or wall.
type kindFlag struct{ k *profile.Kind }

func (f kindFlag) String() string {
	if f.k == nil {
		return ""
	}
	return f.k.String()
}

func (f kindFlag) Set(s string) error {
	k, err := profile.ParseKind(s)
	*f.k = k
	return err
}

// apiError says in one line what went wrong talking to the agent.
func apiError(cmd, serverURL string, err error) error {
	if errors.Is(err, server.ErrNoAgent) {
		return fmt.Errorf("no agent at %s (start one with 'sudo flint agent')", serverURL)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is known; the cause is the news
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

// TopConfig is what `flint top` was asked to do.
type TopConfig struct {
	APIConfig
	N   int  // functions shown; 0: all
	Cum bool // sort by cumulative samples instead of flat
}

// Validate checks the config.
func (c *TopConfig) Validate() error {
	if c.N < 0 {
		return fmt.Errorf("-n %d: want a number of functions, or 0 for all", c.N)
	}
	return c.APIConfig.Validate()
}

func parseTop(args []string) (*TopConfig, error) {
	c := &TopConfig{N: 20}
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	apiFlags(fs, &c.APIConfig)
	fs.IntVar(&c.N, "n", c.N, "show this many `functions` (0: all)")
	fs.BoolVar(&c.Cum, "cum", false, "sort by cumulative samples (the function and its callees)")
	typeFlag(fs, &c.APIConfig)
	if err := parseFlags(fs, args, "Usage: flint top [--since 15m] [--selector SEL] [--type cpu|off-cpu|wall] [-n 20] [--cum]\n\nLists the functions that took the most CPU (or time off it) in a time range, as go tool pprof -top does."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func top(args []string, stdout io.Writer) error {
	c, err := parseTop(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tree, err := c.client().Tree(ctx, c.values())
	if err != nil {
		return apiError("top", c.Server, err)
	}
	rows := profile.TopFunctions(tree, c.Cum)
	total := tree.Total
	if total == 0 {
		fmt.Fprintln(stdout, "no samples")
		return nil
	}
	shown := rows
	if c.N > 0 && len(rows) > c.N {
		shown = rows[:c.N]
	}
	var flat int64
	for _, r := range shown {
		flat += r.Flat
	}
	// Counts read as samples, or as time (nanoseconds) as flint trace
	// prints it.
	amount, what := func(n int64) string { return strconv.FormatInt(n, 10) }, " samples"
	if tree.Unit == "ns" {
		amount, what = func(n int64) string { return fmtNs(float64(n)) }, ""
	}
	fmt.Fprintf(stdout, "Showing %d of %d functions, %s of %s%s (%s)\n",
		len(shown), len(rows), amount(flat), amount(total), what, strings.TrimSpace(percent(flat, total)))
	// go tool pprof -top's columns.
	fmt.Fprintf(stdout, "%10s %5s%% %4s%% %10s %5s%%\n", "flat", "flat", "sum", "cum", "cum")
	var sum int64
	for _, r := range shown {
		sum += r.Flat
		fmt.Fprintf(stdout, "%10s %s %s %10s %s  %s\n", amount(r.Flat), percent(r.Flat, total), percent(sum, total), amount(r.Cum), percent(r.Cum, total), r.Name)
	}
	return nil
}

// percent formats a share as go tool pprof does, six characters wide.
func percent(n, total int64) string {
	r := 100 * math.Abs(float64(n)/float64(total))
	switch {
	case r >= 99.95 && r <= 100.05:
		return "  100%"
	case r >= 1:
		return fmt.Sprintf("%5.2f%%", r)
	}
	return fmt.Sprintf("%5.2g%%", r)
}

// SeriesConfig is what `flint series` was asked to do.
type SeriesConfig struct {
	APIConfig
	By    string        // label
	Step  time.Duration // 0: the API's default
	Limit int           // columns (series) shown; the rest are summed
	JSON  bool
}

// Validate checks the config.
func (c *SeriesConfig) Validate() error {
	switch {
	case c.Step != 0 && c.Step < time.Second:
		return fmt.Errorf("--step %s: the smallest step is 1s", c.Step)
	case c.Limit < 1 || c.Limit > 1000:
		return fmt.Errorf("--limit %d: want 1 to 1000 series", c.Limit)
	case c.By == "":
		return errors.New("--by: want a label name, such as comm or pid")
	}
	return c.APIConfig.Validate()
}

func parseSeries(args []string) (*SeriesConfig, error) {
	c := &SeriesConfig{By: profile.LabelComm, Limit: 10}
	fs := flag.NewFlagSet("series", flag.ContinueOnError)
	apiFlags(fs, &c.APIConfig)
	fs.StringVar(&c.By, "by", c.By, "the `label` whose values are the columns")
	fs.Var(durationFlag{&c.Step}, "step", "one row per `duration` (default: about 300 rows, at least 10s)")
	fs.IntVar(&c.Limit, "limit", c.Limit, "show the `n` busiest values; the rest are summed as (other)")
	fs.BoolVar(&c.JSON, "json", false, "print the API's JSON instead of a table")
	typeFlag(fs, &c.APIConfig)
	if err := parseFlags(fs, args, "Usage: flint series [--since 1h] [--selector SEL] [--type cpu|off-cpu|wall] [--by comm] [--step 10s] [--json]\n\nPrints CPU use over time as top's %CPU (100 is one CPU), or with --type off-cpu or wall\nthe threads waiting (or either), one column per value of a label."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func series(args []string, stdout io.Writer) error {
	c, err := parseSeries(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	q := c.values()
	q.Set("by", c.By)
	q.Set("limit", strconv.Itoa(c.Limit))
	if c.Step != 0 {
		q.Set("step", strconv.FormatFloat(c.Step.Seconds(), 'f', -1, 64))
	}
	resp, err := c.client().Series(ctx, q)
	if err != nil {
		return apiError("series", c.Server, err)
	}
	if c.JSON {
		b, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			return fmt.Errorf("series: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return writeSeriesTable(stdout, resp, c.Type)
}

// writeSeriesTable prints one row per step and one column per series of
// a response of type t: CPU as top's %CPU (100 is one CPU) or, when the
// response does not say what a sample stands for, in samples per second;
// off-CPU and wall time (nanoseconds a second) as threads. Times are
// local, with the date only when the range spans more than one day.
func writeSeriesTable(w io.Writer, resp *server.SeriesResponse, t profile.Kind) error {
	if len(resp.Series) == 0 {
		_, err := fmt.Fprintf(w, "no samples from %s to %s\n", resp.From.Local().Format(time.DateTime), resp.To.Local().Format(time.DateTime))
		return err
	}
	layout := time.TimeOnly
	if resp.From.Local().YearDay() != resp.To.Add(-time.Nanosecond).Local().YearDay() || resp.To.Sub(resp.From) >= 24*time.Hour {
		layout = time.DateTime
	}
	unit, scale, digits := "samples/s", 1.0, 1
	switch {
	case t == profile.OffCPU:
		unit, scale, digits = "threads off the CPU", 1e-9, 2
	case t == profile.Wall:
		unit, scale, digits = "threads on or off the CPU", 1e-9, 2
	case resp.Period > 0:
		unit, scale = "%CPU", 100*resp.Period
	}
	fmt.Fprintf(w, "%s by %s, step %s\n", unit, resp.By, time.Duration(resp.Step*float64(time.Second)))
	// Row 0 is the header; column 0 the time, left-aligned; rates right.
	rows := make([][]string, len(resp.Series[0].Points)+1)
	rows[0] = []string{"time"}
	for _, s := range resp.Series {
		name := s.Value
		switch {
		case s.Other:
			name = "(other)"
		case name == "":
			name = "(none)"
		}
		rows[0] = append(rows[0], strings.Join(strings.Fields(name), " "))
	}
	for i := range resp.Series[0].Points {
		sec := resp.Series[0].Points[i][0]
		rows[i+1] = []string{time.Unix(0, int64(sec*1e9)).Local().Format(layout)}
		for _, s := range resp.Series {
			rows[i+1] = append(rows[i+1], strconv.FormatFloat(s.Points[i][1]*scale, 'f', digits, 64))
		}
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for j, cell := range r {
			widths[j] = max(widths[j], utf8.RuneCountInString(cell))
		}
	}
	bw := bufio.NewWriter(w)
	for _, r := range rows {
		for j, cell := range r {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(cell))
			if j == 0 {
				bw.WriteString(cell + pad)
			} else {
				bw.WriteString("  " + pad + cell)
			}
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
