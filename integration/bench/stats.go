package main

import (
	"fmt"
	"slices"
	"time"
)

// samples are latencies of one operation.
type samples []time.Duration

// pct is the nearest-rank percentile p (0..100) in ms.
func (s samples) pct(p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(float64(len(c))*p/100+0.5) - 1
	i = max(0, min(i, len(c)-1))
	return float64(c[i]) / float64(time.Millisecond)
}

func (s samples) p50() float64 { return s.pct(50) }
func (s samples) p90() float64 { return s.pct(90) }

// medianF is the median of floats.
func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func medianI(v []int64) int64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return int64(medianF(f))
}

// rotate returns s rotated left by r (round-robin start).
func rotate[T any](s []T, r int) []T {
	if len(s) == 0 {
		return s
	}
	r = ((r % len(s)) + len(s)) % len(s)
	return append(slices.Clone(s[r:]), s[:r]...)
}

func ms(v float64) string { return fmt.Sprintf("%.1f", v) }

// signedMs formats a difference in ms with its sign.
func signedMs(v float64) string { return fmt.Sprintf("%+.1f", v) }

func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}
