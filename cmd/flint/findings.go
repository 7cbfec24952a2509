package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/doctor"
	"github.com/flint-dev/flint/internal/profile"
)

// FindingsConfig is what `flint findings` was asked to do.
type FindingsConfig struct {
	APIConfig
	JSON bool
}

func parseFindings(args []string) (*FindingsConfig, error) {
	c := &FindingsConfig{}
	fs := flag.NewFlagSet("findings", flag.ContinueOnError)
	apiFlags(fs, &c.APIConfig)
	fs.BoolVar(&c.JSON, "json", false, "print the API's JSON: every finding of every examined window")
	if err := parseFlags(fs, args, "Usage: flint findings [--since 1h] [--selector SEL] [--json]\n\nPrints what the agent's doctor found: each problem once, worst first, with when it was seen."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// storedFinding is a finding as /api/v1/findings returns it.
type storedFinding struct {
	doctor.Finding
	Time   time.Time         `json:"time"`
	Labels map[string]string `json:"labels"`
}

func findings(args []string, stdout io.Writer) error {
	c, err := parseFindings(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	resp, err := c.client().Findings(ctx, c.values())
	if err != nil {
		return apiError("findings", c.Server, err)
	}
	if c.JSON {
		b, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			return fmt.Errorf("findings: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	all := make([]storedFinding, len(resp.Findings))
	for i, raw := range resp.Findings {
		if err := json.Unmarshal(raw, &all[i]); err != nil {
			return fmt.Errorf("findings: %w", err)
		}
	}
	latest, seen := summarize(all)
	layout := time.TimeOnly
	if resp.To.Sub(resp.From) >= 24*time.Hour {
		layout = time.DateTime
	}
	lines := make([]string, len(seen))
	for i, s := range seen {
		lines[i] = fmt.Sprintf("seen in %d examined window(s), %s to %s; the latest:", s.count, s.first.Local().Format(layout), s.last.Local().Format(layout))
	}
	title := fmt.Sprintf("the agent's doctor, %s to %s", resp.From.Local().Format(time.DateTime), resp.To.Local().Format(time.DateTime))
	writeFindings(stdout, title, latest, lines, nil)
	return nil
}

// sighting is when one problem was seen.
type sighting struct {
	count       int
	first, last time.Time
}

// summarize folds the findings of many windows into one per problem (the
// detector on one process image and thread), keeping the latest, worst
// first.
func summarize(all []storedFinding) ([]doctor.Finding, []sighting) {
	type problem struct{ id, pid, startTime, tid string }
	type entry struct {
		latest storedFinding
		seen   sighting
	}
	byProblem := map[problem]*entry{}
	for _, f := range all {
		k := problem{f.ID, f.Labels[profile.LabelPID], f.Labels[profile.LabelStartTime], fmt.Sprint(f.TID)}
		e := byProblem[k]
		if e == nil {
			e = &entry{latest: f, seen: sighting{first: f.Time}}
			byProblem[k] = e
		}
		if !f.Time.Before(e.latest.Time) {
			e.latest = f
		}
		e.seen.count++
		if f.Time.Before(e.seen.first) {
			e.seen.first = f.Time
		}
		if f.Time.After(e.seen.last) {
			e.seen.last = f.Time
		}
	}
	entries := make([]*entry, 0, len(byProblem))
	for _, e := range byProblem {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b *entry) int {
		return cmp.Or(doctor.Worse(a.latest.Finding, b.latest.Finding), b.seen.last.Compare(a.seen.last))
	})
	out := make([]doctor.Finding, len(entries))
	seen := make([]sighting, len(entries))
	for i, e := range entries {
		out[i], seen[i] = e.latest.Finding, e.seen
	}
	return out, seen
}
