package store

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store/chtest"
)

// TestClickHouseShards runs the store over two ClickHouse servers as two
// shards of Distributed tables: nodes a and b write through the first
// server, each node's rows land on one shard, and queries see the union.
func TestClickHouseShards(t *testing.T) {
	servers := chtest.StartCluster(t, "flint_shards", 2)
	ctx := context.Background()
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.HTTPPort)
	}
	dsn := "clickhouse://" + strings.Join(hosts, ",") + "/flint?cluster=flint_shards"
	s := openClickHouse(t, dsn, testOptions())

	// Two node names that cityHash64 puts on different shards.
	var nodes []string
	for i := 0; len(nodes) < 2; i++ {
		name := fmt.Sprintf("node-%d", i)
		var shard uint64
		err := s.queryRows(ctx, "SELECT toUInt64(cityHash64("+quote(name)+") % 2)", func(r *rowReader) error {
			shard = r.uint64()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if int(shard) == len(nodes) {
			nodes = append(nodes, name)
		}
	}

	wl := newWorkload(t0)
	var want []*profile.Profile // as CPU time at the workload's period
	for i := range 7 {
		p := wl.window(i)
		node := nodes[i%2]
		for _, smp := range p.Samples {
			smp.Labels = maps.Clone(smp.Labels)
			smp.Labels[profile.LabelNode] = node
		}
		w := p
		if i == 6 {
			// A node sampling at a fifth of the rate: the shards' counts of
			// one query are read one period at a time.
			p.Period *= 5
			w = &profile.Profile{Start: p.Start, Duration: p.Duration, Period: wlPeriod}
			for _, smp := range p.Samples {
				w.Samples = append(w.Samples, &profile.Sample{Stack: smp.Stack, Count: 5 * smp.Count, Labels: smp.Labels})
			}
		}
		want = append(want, w)
		f := finding(p.Start, "busy-poll", "svc1")
		f.Labels[profile.LabelNode] = node
		// Resent: the check for an earlier write must see through the
		// Distributed table.
		for range 2 {
			if err := s.WriteWindow(ctx, p, []Finding{f}, true); err != nil {
				t.Fatal(err)
			}
		}
	}

	all := Query{From: t0, To: t0.Add(time.Hour)}
	got := query(t, s, all)
	if diff := compare(canonical(got.Samples), canonical(filter(want, nil, nil))); diff != "" {
		t.Error(diff)
	}
	one := all
	one.Selector = mustParse(t, `{node="`+nodes[1]+`",comm="svc1"}`)
	one.KeepLabels = []string{"node"}
	got = query(t, s, one)
	if diff := compare(canonical(got.Samples), canonical(filter(want, one.Selector, one.KeepLabels))); diff != "" {
		t.Error(diff)
	}
	values, err := s.LabelValues(ctx, profile.LabelNode, all.From, all.To)
	if err != nil || !reflect.DeepEqual(values, nodes) {
		t.Errorf("nodes %q, %v; want %q", values, err, nodes)
	}
	set, err := s.Series(ctx, SeriesQuery{Query: all, By: profile.LabelNode, Step: time.Hour})
	if err != nil || set.Period != wlPeriod || len(set.Series) != 2 || set.Series[0].Points[0].Samples+set.Series[1].Points[0].Samples != int64(11*wlSamples) {
		t.Errorf("series %+v, %v; want two adding up to %d samples of %s", set, err, 11*wlSamples, wlPeriod)
	}
	fs, err := s.Findings(ctx, all)
	if err != nil || len(fs) != 7 {
		t.Errorf("%d findings, %v; want 7", len(fs), err)
	}

	// Each shard holds its own node's rows, and only them.
	for i, srv := range servers {
		shard := openClickHouse(t, srv.DSN("flint"), testOptions())
		for _, table := range []string{"samples_local", "totals_local", "labelsets_local", "stacks_local", "windows_local", "findings_local"} {
			mine := chCount(t, shard, table+" WHERE node = "+quote(nodes[i]))
			theirs := chCount(t, shard, table+" WHERE node != "+quote(nodes[i]))
			if mine == 0 || theirs != 0 {
				t.Errorf("shard %d %s: %d rows of %s, %d of others", i, table, mine, nodes[i], theirs)
			}
		}
	}

	// Retention drops the days on every shard.
	s.now = func() time.Time { return t0.Add(10 * 24 * time.Hour) }
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"samples", "labelsets", "stacks", "windows", "findings"} {
		if n := chCount(t, s, table); n != 0 {
			t.Errorf("%d rows of %s past retention", n, table)
		}
	}
}
