package report

import (
	"cmp"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Chart is a line chart of calls per second (log scale) against payload
// size, one series per system, with min-max whiskers.
type Chart struct {
	Title    string
	Subtitle string
	Rows     []Row    // rows with RPS; x is PayloadBytes, series is System
	Order    []string // series order (systems not listed follow by name)
}

// Colors of the systems, chosen to stay apart for common color blindness;
// warren is the dark, thick line.
var colors = map[string]string{
	"warren": "#000000",
	"grpc":   "#0072b2",
	"ttrpc":  "#009e73",
	"drpc":   "#cc79a7",
	"netrpc": "#e69f00",
	"raw":    "#999999",
}

// SVG writes the chart as a standalone SVG document.
func (c Chart) SVG(w io.Writer) error {
	const (
		width, height            = 820, 500
		left, right, top, bottom = 90, 190, 70, 70
		plotW, plotH             = width - left - right, height - top - bottom
	)
	var sizes []int
	series := map[string][]Row{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range c.Rows {
		if r.RPS <= 0 || r.PayloadBytes <= 0 {
			continue
		}
		if !slices.Contains(sizes, r.PayloadBytes) {
			sizes = append(sizes, r.PayloadBytes)
		}
		series[r.System] = append(series[r.System], r)
		lo = min(lo, r.RPS, nonZero(r.RPSMin, r.RPS))
		hi = max(hi, r.RPS, r.RPSMax)
	}
	slices.Sort(sizes)
	names := make([]string, 0, len(series))
	for name := range series {
		names = append(names, name)
	}
	rank := func(s string) int {
		if i := slices.Index(c.Order, s); i >= 0 {
			return i
		}
		return len(c.Order)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(c.Title))
	p(`<text x="%d" y="44" fill="#444444">%s</text>`+"\n", left, esc(c.Subtitle))
	if len(sizes) == 0 {
		p(`<text x="%d" y="%d">no unary results</text>`+"\n</svg>\n", left, top+plotH/2)
		_, err := io.WriteString(w, b.String())
		return err
	}

	// y: log10 scale over whole decades around the data.
	d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	y := func(v float64) float64 { return top + plotH*(1-(math.Log10(v)-d0)/(d1-d0)) }
	// x: payload sizes evenly spaced; they grow tenfold, so this is a log
	// scale too.
	x := func(size int) float64 {
		if len(sizes) == 1 {
			return left + plotW/2
		}
		return left + 30 + float64(slices.Index(sizes, size))*(plotW-60)/float64(len(sizes)-1)
	}

	// Grid and y labels.
	for d := d0; d <= d1; d++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow(10, d)
			if d == d1 && m > 1 {
				break
			}
			yy := y(v)
			if m == 1 {
				p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#bbbbbb"/>`+"\n", left, yy, left+plotW, yy)
				p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-8, yy, esc(short(v)))
			} else {
				p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eeeeee"/>`+"\n", left, yy, left+plotW, yy)
			}
		}
	}
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>`+"\n", left, top, plotW, plotH)
	for _, s := range sizes {
		xx := x(s)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333"/>`+"\n", xx, top+plotH, xx, top+plotH+5)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xx, top+plotH+20, esc(Size(s)))
	}
	p(`<text x="%d" y="%d" text-anchor="middle">payload size (request = reply)</text>`+"\n", left+plotW/2, height-22)
	p(`<text transform="translate(24 %d) rotate(-90)" text-anchor="middle">calls per second (log scale, higher is better)</text>`+"\n", top+plotH/2)

	// Series: a line through the medians, a whisker from min to max, and
	// warren's points labeled with their value.
	for i, name := range names {
		rs := series[name]
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.PayloadBytes, b.PayloadBytes) })
		col := cmp.Or(colors[name], "#d55e00")
		sw := 2.0
		if name == "warren" {
			sw = 3.5
		}
		p(`<g class="series" data-system="%s" stroke="%s" fill="%s">`+"\n", esc(name), col, col)
		var pts []string
		for _, r := range rs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.PayloadBytes), y(r.RPS)))
		}
		p(`<polyline fill="none" stroke-width="%.1f" points="%s"/>`+"\n", sw, strings.Join(pts, " "))
		for _, r := range rs {
			xx := x(r.PayloadBytes)
			if r.RPSMin > 0 && r.RPSMax > 0 {
				p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke-width="1.5"/>`+"\n", xx, y(r.RPSMin), xx, y(r.RPSMax))
			}
			p(`<circle cx="%.1f" cy="%.1f" r="3.5"><title>%s %s: %s calls/s</title></circle>`+"\n", xx, y(r.RPS), esc(name), esc(Size(r.PayloadBytes)), Sig3(r.RPS))
			if name == "warren" {
				p(`<text x="%.1f" y="%.1f" stroke="none" text-anchor="start" font-weight="bold">%s</text>`+"\n", xx+7, y(r.RPS)-7, short(r.RPS))
			}
		}
		p("</g>\n")
		// Legend entry.
		ly := top + 10 + i*22
		label := name
		if conns := rs[0].Conns; conns > 1 {
			label += fmt.Sprintf(" (%d conns)", conns)
		}
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"/>`+"\n", left+plotW+15, ly, left+plotW+40, ly, col, sw)
		p(`<circle cx="%d" cy="%d" r="3.5" fill="%s"/>`+"\n", left+plotW+27, ly, col)
		p(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", left+plotW+47, ly, esc(label))
	}
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func nonZero(v, alt float64) float64 {
	if v > 0 {
		return v
	}
	return alt
}

// short writes a rate compactly: 1k, 20k, 103k, 1.5M, 610.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case v >= 1e3:
		if v >= 1e4 {
			return fmt.Sprintf("%.0fk", v/1e3)
		}
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), ".0") + "k"
	}
	return fmt.Sprintf("%.0f", v)
}

func esc(s string) string { return html.EscapeString(s) }
