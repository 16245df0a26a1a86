package main

import (
	"math"
	"testing"
)

// TestWithin: a "within 10%" verdict compares the absolute difference, so
// a figure 104% below its base is not within 10% of it (a signed
// comparison once printed "-104% ... holds").
func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		b, a float64
		want bool
	}{
		{110, 100, true},
		{111, 100, false},
		{90, 100, true},
		{89, 100, false},
		{-4, 100, false}, // -104 %
		{11.1, 26.7, false},
		{math.NaN(), 100, false},
		{100, math.NaN(), false},
	} {
		if got := within(tc.b, tc.a, 0.1); got != tc.want {
			t.Errorf("within(%v, %v, 0.1) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

// TestSpliceText: a section replaces what stands between its markers and
// nothing else; a document without them gets it at its end.
func TestSpliceText(t *testing.T) {
	begin, end := markers("scale")
	sec := begin + "\nnew\n" + end
	doc := "# head\n\n" + begin + "\nold\n" + end + "\n\n## tail\n"
	got, err := spliceText(doc, "scale", "\n"+sec+"\n")
	if want := "# head\n\n" + sec + "\n\n## tail\n"; err != nil || got != want {
		t.Errorf("spliced %q (%v), want %q", got, err, want)
	}
	got, err = spliceText("# head\n", "scale", sec)
	if want := "# head\n\n" + sec + "\n"; err != nil || got != want {
		t.Errorf("appended %q (%v), want %q", got, err, want)
	}
	if _, err := spliceText(doc, "scale", "no markers"); err == nil {
		t.Error("a section without its markers spliced")
	}
}
