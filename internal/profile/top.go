package profile

import "sort"

// FunctionTotal is one function's samples: in the function itself (Flat)
// and in it or its callees (Cum).
type FunctionTotal struct {
	Name      string
	Flat, Cum int64
}

// TopFunctions sums a call tree per function name, as pprof -top does:
// Flat from each node's self, Cum from each node's total but counted once
// per path, so recursion does not count a sample twice. The root and the
// process nodes are not functions. Rows are sorted by Flat (or Cum), then
// the other, then name.
func TopFunctions(root *Node, byCum bool) []FunctionTotal {
	rows := map[string]*FunctionTotal{}
	onPath := map[string]int{}
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.Kind != KindRoot && n.Kind != KindProcess {
			r := rows[n.Name]
			if r == nil {
				r = &FunctionTotal{Name: n.Name}
				rows[n.Name] = r
			}
			r.Flat += n.Self
			if onPath[n.Name] == 0 {
				r.Cum += n.Total
			}
			onPath[n.Name]++
			defer func() { onPath[n.Name]-- }()
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	out := make([]FunctionTotal, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		ka, kb, sa, sb := a.Flat, b.Flat, a.Cum, b.Cum
		if byCum {
			ka, kb, sa, sb = sa, sb, ka, kb
		}
		if ka != kb {
			return ka > kb
		}
		if sa != sb {
			return sa > sb
		}
		return a.Name < b.Name
	})
	return out
}
