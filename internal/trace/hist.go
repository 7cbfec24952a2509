package trace

import (
	"math"
	"math/bits"
)

// Bucket layout, as bpf/trace.h defines it: values below 8 ns have a bucket
// each, then each power of two is split into 8 sub-buckets.
const (
	histSubBits = 3
	histSub     = 1 << histSubBits
	// HistBuckets is the number of latency buckets kept per function.
	HistBuckets = len(traceLatencyHist{}.Buckets)
)

// Histogram is the latency distribution of a function's calls, in ns.
type Histogram struct {
	// Counts per log-linear bucket; see BucketBounds.
	Counts []uint64
	// SumNs is the total latency of the counted calls.
	SumNs uint64
}

// bucketOf returns the bucket of a latency, as the BPF program computes it.
func bucketOf(ns uint64) int {
	if ns < histSub {
		return int(ns)
	}
	e := bits.Len64(ns) - 1
	i := (e-histSubBits+1)*histSub + int(ns>>(e-histSubBits)&(histSub-1))
	return min(i, HistBuckets-1)
}

// BucketBounds returns the latencies [lo, hi) in ns that bucket i counts.
// The last bucket also counts everything longer.
func BucketBounds(i int) (lo, hi uint64) {
	if i < histSub {
		return uint64(i), uint64(i) + 1
	}
	e := i/histSub + histSubBits - 1
	sub := uint64(i % histSub)
	width := uint64(1) << (e - histSubBits)
	lo = (histSub + sub) * width
	return lo, lo + width
}

// Count is the number of calls in the histogram.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Mean is the mean latency in ns; 0 for an empty histogram.
func (h *Histogram) Mean() float64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return float64(h.SumNs) / float64(n)
}

// Percentile returns the latency in ns below which a share q (0..1) of the
// calls fall, interpolating linearly inside the bucket that holds it (a
// bucket is at most 12.5% wide); 0 for an empty histogram.
func (h *Histogram) Percentile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var seen float64
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := BucketBounds(i)
			frac := (rank - seen) / float64(c)
			return float64(lo) + frac*float64(hi-lo)
		}
		seen += float64(c)
	}
	lo, _ := BucketBounds(len(h.Counts) - 1)
	return float64(lo)
}

// Log2Bucket is one power-of-two range of a log2 histogram.
type Log2Bucket struct {
	LowNs  uint64 `json:"low_ns"` // [LowNs, HighNs)
	HighNs uint64 `json:"high_ns"`
	Count  uint64 `json:"count"`
}

// Log2 sums the histogram into power-of-two buckets, from the first to the
// last that counts a call.
func (h *Histogram) Log2() []Log2Bucket {
	var out []Log2Bucket
	for i, c := range h.Counts {
		lo, _ := BucketBounds(i)
		p := uint64(0)
		if lo > 0 {
			p = uint64(1) << (bits.Len64(lo) - 1)
		}
		if len(out) == 0 || out[len(out)-1].LowNs != p {
			hi := uint64(1)
			if p > 0 {
				hi = min(p<<1, math.MaxUint64)
			}
			out = append(out, Log2Bucket{LowNs: p, HighNs: hi})
		}
		out[len(out)-1].Count += c
	}
	first, last := -1, -1
	for i, b := range out {
		if b.Count > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	return out[first : last+1]
}

// add adds the per-CPU histograms of one function.
func (h *Histogram) add(v *traceLatencyHist) {
	if h.Counts == nil {
		h.Counts = make([]uint64, HistBuckets)
	}
	for i, c := range v.Buckets {
		h.Counts[i] += c
	}
	h.SumNs += v.SumNs
}
