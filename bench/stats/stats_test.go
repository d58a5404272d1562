package stats

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	for _, c := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 50, 7},
		{[]float64{7}, 99, 7},
		{hundred, 50, 50},
		{hundred, 99, 99},
		{hundred, 100, 100},
		{hundred, 0.1, 1},
		{[]float64{1, 2, 3, 4}, 50, 2}, // nearest rank: ceil(2) = 2nd
		{[]float64{1, 2, 3, 4}, 51, 3}, // ceil(2.04) = 3rd
		{[]float64{1, 2, 3, 4}, 99, 4}, // ceil(3.96) = 4th
		{[]float64{1, 2, 3, 4, 5}, 50, 3},
	} {
		if got := Percentile(c.xs, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.xs, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	got := Summarize(d)
	want := Latency{Min: 1, Mean: 50.5, P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if (Summarize(nil) != Latency{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestOf(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{3}, Spread{3, 3, 3}},
		{[]float64{5, 1, 3}, Spread{3, 1, 5}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4}},
		{[]float64{2, 9, 2, 2, 1}, Spread{2, 1, 9}},
	} {
		in := append([]float64(nil), c.xs...)
		if got := Of(c.xs); got != c.want {
			t.Errorf("Of(%v) = %+v, want %+v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Errorf("Of modified its input: %v", c.xs)
			}
		}
	}
}
